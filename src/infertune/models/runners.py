"""Runners: the forward pass on one runtime. Torch imports stay inside functions so the core
works without the torch extra."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from infertune.models.adapter import ModelInputs, Runtime


class TorchRunner:
    """Runs an ``nn.Module`` under ``torch.inference_mode``.

    ``call`` maps (module, tensors by name) to one output tensor; it hides the difference
    between a Hugging Face model (keyword inputs, an output object) and a plain module.
    ``autocast`` (e.g. torch.bfloat16) wraps the call in CPU/GPU autocast.
    """

    runtime: Runtime = "torch"

    def __init__(
        self,
        module: Any,
        input_names: list[str],
        call: Callable[[Any, dict[str, Any]], Any] | None = None,
        precision: str = "fp32",
        autocast: Any = None,
        device: str = "cpu",
    ) -> None:
        self.module = module
        self.input_names = list(input_names)
        self.precision = precision
        self.autocast = autocast
        self.device = device
        self._call = call or _positional_call

    def __call__(self, feeds: ModelInputs) -> np.ndarray:
        import torch

        tensors = {
            name: torch.from_numpy(np.ascontiguousarray(feeds[name])).to(self.device)
            for name in self.input_names
        }
        with torch.inference_mode():
            if self.autocast is not None:
                device_type = "cuda" if self.device.startswith("cuda") else "cpu"
                with torch.autocast(device_type=device_type, dtype=self.autocast):
                    out = self._call(self.module, tensors)
            else:
                out = self._call(self.module, tensors)
        return out.detach().float().cpu().numpy()


def _positional_call(module: Any, tensors: dict[str, Any]) -> Any:
    out = module(*tensors.values())
    return out[0] if isinstance(out, (tuple, list)) else out


def hf_call(output_field: str) -> Callable[[Any, dict[str, Any]], Any]:
    """A call for Hugging Face models: keyword inputs, then one field of the output."""

    def call(module: Any, tensors: dict[str, Any]) -> Any:
        return getattr(module(**tensors), output_field)

    return call


class OrtRunner:
    """Runs an ONNX Runtime InferenceSession; feeds are cast to the graph's input dtypes."""

    runtime: Runtime = "onnxruntime"

    def __init__(self, session: Any, precision: str = "fp32",
                 opened_with: dict[str, Any] | None = None) -> None:
        self.session = session
        self.precision = precision
        # ort_session's arguments, when this runner opened the session itself (see reopen)
        self.opened_with = opened_with
        self.input_names = [i.name for i in session.get_inputs()]
        self._dtypes = {i.name: ORT_DTYPES.get(i.type, None) for i in session.get_inputs()}
        self._output = session.get_outputs()[0].name

    @classmethod
    def open(cls, path: str, precision: str = "fp32", **session_args: Any) -> OrtRunner:
        """A runner on a new session of the model file; ``session_args`` go to ort_session."""
        args = {"path": path, **session_args}
        return cls(ort_session(**args), precision=precision, opened_with=args)

    def reopen(self, **changes: Any) -> OrtRunner:
        """The same model and settings in a new session, with ``changes`` to ort_session's
        arguments (e.g. allow_spinning=False)."""
        if self.opened_with is None:
            raise ValueError("this runner was built on a session it did not open; "
                             "use OrtRunner.open to be able to reopen it")
        return OrtRunner.open(**{**self.opened_with, **changes, "precision": self.precision})

    def __call__(self, feeds: ModelInputs) -> np.ndarray:
        cast = {}
        for name in self.input_names:
            value = feeds[name]
            dtype = self._dtypes[name]
            cast[name] = value.astype(dtype, copy=False) if dtype is not None else value
        return self.session.run([self._output], cast)[0]


ORT_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}


def ort_session(path: str, intra_op_threads: int = 0, inter_op_threads: int = 0,
                graph_level: str = "all",
                providers: Sequence[str | tuple[str, dict[str, str]]] | None = None,
                allow_spinning: bool = True,
                disabled_optimizers: list[str] | None = None) -> Any:
    """An InferenceSession with explicit thread and graph-optimization settings.

    ``disabled_optimizers`` names onnxruntime graph transformers to skip at load (an
    InferenceSession keyword onnxruntime keeps undocumented but supports). ``providers``:
    names or (name, options) pairs, in priority order (models/gpu.py builds the GPU ones)."""
    import onnxruntime as ort  # the onnx extra: imported when a session opens

    levels = {
        "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    options = ort.SessionOptions()
    options.graph_optimization_level = levels[graph_level]
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = inter_op_threads
    if not allow_spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return ort.InferenceSession(path, options,
                                providers=list(providers or ["CPUExecutionProvider"]),
                                disabled_optimizers=disabled_optimizers or None)
