"""TensorAdapter: for models whose inputs are already tensors (.onnx, TorchScript, entry
points). A raw input is one example: an array (single-input models) or a dict of arrays by
input name. Preprocess stacks examples along a new batch axis; postprocess splits the rows."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infertune.errors import IncompatibleInputError
from infertune.models.adapter import ModelInfo, ModelInputs, Runner


@dataclass
class TensorAdapter:
    info: ModelInfo
    runner: Runner
    example: dict[str, np.ndarray]  # one example per input name, without the batch axis
    # Per input, the example axes whose length may vary (an ONNX graph names them). None means
    # unknown (TorchScript, entry points): then the first example axis may vary, so a sequence
    # model still takes any length, while the other axes (feature widths) are checked.
    dynamic_axes: dict[str, tuple[int, ...]] | None = field(default=None)

    def preprocess(self, raw: Sequence[Any]) -> ModelInputs:
        if isinstance(raw, (str, bytes)) or not isinstance(raw, Sequence) or len(raw) == 0:
            raise IncompatibleInputError(
                f"{self.info.id} takes a non-empty list of examples; got {type(raw).__name__}"
            )
        names = list(self.example)
        columns: dict[str, list[np.ndarray]] = {name: [] for name in names}
        for i, item in enumerate(raw):
            fields = item if isinstance(item, dict) else {names[0]: item}
            if len(names) > 1 and not isinstance(item, dict):
                raise IncompatibleInputError(
                    f"{self.info.id} has inputs {names}; example {i} must be a dict of them"
                )
            for name in names:
                if name not in fields:
                    raise IncompatibleInputError(
                        f"{self.info.id}: example {i} lacks input {name!r}; it needs {names}"
                    )
                columns[name].append(self._as_array(fields[name], name, i))
        return {name: self._stack(name, values) for name, values in columns.items()}

    def _stack(self, name: str, values: list[np.ndarray]) -> np.ndarray:
        shapes = {v.shape for v in values}
        if len(shapes) > 1:
            raise IncompatibleInputError(
                f"{self.info.id}: input {name!r} has shapes {sorted(shapes)} within one batch; "
                "pad the examples to one shape or send them in separate batches"
            )
        return np.stack(values)

    def _as_array(self, value: Any, name: str, index: int) -> np.ndarray:
        expected = self.example[name]
        try:
            arr = np.asarray(value, dtype=expected.dtype)
        except (TypeError, ValueError) as exc:
            raise IncompatibleInputError(
                f"{self.info.id}: example {index} input {name!r} is not numeric "
                f"({expected.dtype} expected)"
            ) from exc
        if arr.ndim != expected.ndim or any(
            got != want
            for axis, (got, want) in enumerate(zip(arr.shape, expected.shape, strict=True))
            if axis not in self._variable_axes(name)
        ):
            raise IncompatibleInputError(
                f"{self.info.id}: example {index} input {name!r} has shape {arr.shape}; "
                f"the model takes {expected.shape} per example"
            )
        return arr

    def _variable_axes(self, name: str) -> tuple[int, ...]:
        if self.dynamic_axes is None:
            return (0,)
        return self.dynamic_axes.get(name, ())

    def forward(self, inputs: ModelInputs) -> np.ndarray:
        return self.runner(inputs)

    def postprocess(self, outputs: np.ndarray, inputs: ModelInputs) -> list[Any]:
        return list(outputs)

    def predict(self, raw: Sequence[Any]) -> list[Any]:
        inputs = self.preprocess(raw)
        return self.postprocess(self.forward(inputs), inputs)

    def sample_inputs(self, n: int) -> list[Any]:
        rng = np.random.default_rng(0)
        names = list(self.example)

        def one() -> Any:
            made = {k: _like(v, rng) for k, v in self.example.items()}
            return made if len(names) > 1 else made[names[0]]

        return [one() for _ in range(n)]

    def with_runner(self, runner: Runner, **changes: Any) -> TensorAdapter:
        # explicit changes win over the runner's own fields (e.g. precision="int8-dynamic")
        fields = {"runtime": runner.runtime, "precision": runner.precision,
                  "input_names": list(runner.input_names), **changes}
        info = dataclasses.replace(self.info, **fields)
        return dataclasses.replace(self, info=info, runner=runner)


def _like(example: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if np.issubdtype(example.dtype, np.floating):
        return rng.standard_normal(example.shape).astype(example.dtype)
    return example.copy()


def onnx_tensor_adapter(info: ModelInfo, runner: Any) -> TensorAdapter:
    """A TensorAdapter over an onnxruntime runner: one example per input shaped as the graph
    declares it without the batch axis, and the axes the graph names symbolically may vary."""
    example: dict[str, np.ndarray] = {}
    dynamic: dict[str, tuple[int, ...]] = {}
    for inp in runner.session.get_inputs():
        dims = inp.shape[1:]  # the first axis is the batch
        example[inp.name] = np.zeros([d if isinstance(d, int) else 1 for d in dims],
                                     dtype=_ORT_NP.get(inp.type, np.float32))
        dynamic[inp.name] = tuple(i for i, d in enumerate(dims) if not isinstance(d, int))
    return TensorAdapter(info, runner, example, dynamic_axes=dynamic)


_ORT_NP = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32,
           "tensor(double)": np.float64, "tensor(float16)": np.float16, "tensor(bool)": np.bool_}
