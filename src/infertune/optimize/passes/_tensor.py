"""Shared helpers for passes over a tensor baseline (a TensorAdapter: a user's .onnx file run by
onnxruntime, or a TorchScript file or entry point run by torch). ``ort_fp32`` copies the .onnx
file or exports the torch module, and the onnxruntime passes derive from that graph."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from infertune.models.adapter import Adapter
from infertune.models.runners import ORT_DTYPES, ort_session
from infertune.models.variant import InputSpec, Manifest, PassRecord
from infertune.optimize.passes._text import source_sha256
from infertune.optimize.passes.base import PassContext, PassSettings, built


@dataclass(frozen=True)
class ExportSettings(PassSettings):
    """How ``ort_fp32`` made its graph: a Hugging Face export (opset, attention, dynamic axes,
    its time), a torch tensor model's export, or a copy of the user's .onnx (source_file).
    Declared here, not in onnx_export.py, because export_tensor_module returns it."""

    exporter: str
    opset: int | None = built()
    attn_implementation: str | None = built()
    dynamic_axes: dict[str, str] | None = built()
    source_file: str | None = built()
    export_s: float | None = built()


def onnx_file(baseline: Adapter) -> Path | None:
    """The .onnx file a tensor baseline was loaded from, or None if it is not one."""
    info = baseline.info
    path = Path(info.source) if info.source else None
    if info.kind != "tensor" or info.runtime != "onnxruntime" or path is None:
        return None
    return path if path.suffix == ".onnx" and path.is_file() else None


def torch_tensor_module(baseline: Adapter) -> Any:
    """The nn.Module of a torch tensor baseline (TorchScript or entry point), or None."""
    if baseline.info.kind != "tensor" or baseline.info.runtime != "torch":
        return None
    return getattr(baseline.runner, "module", None)


def export_tensor_module(ctx: PassContext, path: Path, opset: int) -> ExportSettings:
    """Export a torch tensor baseline to ONNX with a dynamic batch axis (the other axes keep
    the example's sizes: a traced graph may bake them into reshapes). Returns the settings."""

    import torch

    base = ctx.baseline
    module = torch_tensor_module(base)
    names = list(base.info.input_names)
    feeds = base.preprocess(ctx.sample_inputs()[:2])
    args = tuple(torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in names)
    axes = {n: {0: "batch"} for n in [*names, "output"]}
    # no_grad: after an export traced with autograd on, the TorchScript baseline's next run
    # under inference_mode failed ("Inference tensors cannot be saved for backward")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's tracer warnings
        torch.onnx.export(module, args, str(path), input_names=names, output_names=["output"],
                          dynamic_axes=axes, opset_version=opset, dynamo=False)
    return ExportSettings("torch.onnx.export(dynamo=False) of the torch tensor model",
                          opset=opset, dynamic_axes={"0": "batch"})


def _numpy_dtype(ort_type: str) -> str:
    """numpy's name for an onnxruntime input type ("tensor(float)" -> "float32")."""

    dtype = ORT_DTYPES.get(ort_type)
    return np.dtype(dtype).name if dtype is not None else ort_type


def tensor_manifest(ctx: PassContext, *, variant_id: str, model_path: Path,
                    passes: list[PassRecord]) -> Manifest:
    """A manifest for an onnxruntime variant of a tensor baseline; the inputs, their dtypes
    and symbolic axes are read from the graph at ``model_path``."""

    base = ctx.baseline
    session = ort_session(str(model_path), graph_level="disabled")
    inputs = [InputSpec(i.name, _numpy_dtype(i.type),
                        {str(axis): str(dim) for axis, dim in enumerate(i.shape)
                         if not isinstance(dim, int)})
              for i in session.get_inputs()]
    return Manifest(
        id=variant_id, runtime="onnxruntime", precision="fp32", kind="tensor",
        task=base.info.task, model_file=model_path.name, passes=passes, inputs=inputs,
        output_name=session.get_outputs()[0].name,
        source={"ref": base.info.source, "model_id": base.info.id,
                "sha256": source_sha256(ctx)})
