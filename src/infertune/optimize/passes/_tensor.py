"""Shared helpers for passes over an ONNX tensor baseline (a user's .onnx file run by
onnxruntime through a TensorAdapter): the model is already ONNX, so ``ort_fp32`` copies it and
the onnxruntime passes derive from that copy."""

from __future__ import annotations

from pathlib import Path

from infertune.models.base import Adapter
from infertune.models.variant import InputSpec, Manifest, PassRecord
from infertune.optimize.passes._text import source_sha256
from infertune.optimize.passes.base import PassContext


def onnx_file(baseline: Adapter) -> Path | None:
    """The .onnx file a tensor baseline was loaded from, or None if it is not one."""
    info = baseline.info
    path = Path(info.source) if info.source else None
    if info.kind != "tensor" or info.runtime != "onnxruntime" or path is None:
        return None
    return path if path.suffix == ".onnx" and path.is_file() else None


def _numpy_dtype(ort_type: str) -> str:
    """numpy's name for an onnxruntime input type ("tensor(float)" -> "float32")."""
    import numpy as np

    from infertune.models.runners import ORT_DTYPES

    dtype = ORT_DTYPES.get(ort_type)
    return np.dtype(dtype).name if dtype is not None else ort_type


def tensor_manifest(ctx: PassContext, *, variant_id: str, model_file: str,
                    passes: list[PassRecord]) -> Manifest:
    """A manifest for an onnxruntime variant of an ONNX tensor baseline; the inputs, their
    dtypes and symbolic axes are read from the baseline's session."""
    base = ctx.baseline
    session = base.runner.session  # type: ignore[attr-defined]
    inputs = [InputSpec(i.name, _numpy_dtype(i.type),
                        {str(axis): str(dim) for axis, dim in enumerate(i.shape)
                         if not isinstance(dim, int)})
              for i in session.get_inputs()]
    return Manifest(
        id=variant_id, runtime="onnxruntime", precision="fp32", kind="tensor",
        task=base.info.task, model_file=model_file, passes=passes, inputs=inputs,
        output_name=session.get_outputs()[0].name,
        source={"ref": base.info.source, "model_id": base.info.id,
                "sha256": source_sha256(ctx)})
