"""onnxruntime static INT8 in QDQ format, calibrated on the user's held-out inputs.

Activation ranges come from running the calibration inputs (MinMax, Entropy or Percentile).
The fused graph's contrib ops hide tensor types from ONNX shape inference, so the graph gets
onnxruntime's symbolic shape inference first; without it the calibrators find no tensors."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from infertune.errors import NotApplicableError
from infertune.models.variant import PassRecord
from infertune.optimize.passes._onnx import (
    ORT,
    Int8Scheme,
    Int8Settings,
    OrtDerivedPass,
    choose_int8_scheme,
    quant_type,
    quiet_quantizer,
)
from infertune.optimize.passes.base import PassContext, built
from infertune.optimize.passes.facts import GUESS_SPREAD, InPlan, PassFacts, QuantizeCost
from infertune.optimize.passes.ort_dynamic_int8 import PER_CHANNEL_PRIORS
from infertune.optimize.passes.registry import register

Method = Literal["minmax", "entropy", "percentile"]
# Weighted ops; an encoder graph has only MatMuls, a CNN or an MLP export Conv and Gemm.
STATIC_OP_TYPES = ("MatMul", "Gemm", "Conv")
# taken as dynamic per-channel's, less sure of the floor (min-max calibration measured mean
# cosine 0.931 on minilm here, issue 13)
STATIC_PRIORS = PER_CHANNEL_PRIORS.derived(GUESS_SPREAD, 0.5,
                                           "estimate: as dynamic per-channel INT8")


@dataclass(frozen=True, kw_only=True)
class StaticInt8Settings(Int8Settings):
    calibration: Method
    per_channel: bool
    format: str = "QDQ"
    op_types: tuple[str, ...] = STATIC_OP_TYPES
    calibration_inputs: int | None = built()


@register("ort_int8_static_minmax", method="minmax", facts=PassFacts(
    runtime="onnxruntime", precision="int8", requires=ORT, priors=STATIC_PRIORS,
    cost=QuantizeCost("static"), plans=(InPlan("tensor", "quick", 2),),
    summary="static INT8 (QDQ) calibrated by min-max on the held-out inputs"))
@register("ort_int8_static_entropy", method="entropy", facts=PassFacts(
    runtime="onnxruntime", precision="int8", requires=ORT, priors=STATIC_PRIORS,
    cost=QuantizeCost("static"), summary="static INT8 (QDQ) calibrated by entropy"))
@register("ort_int8_static_percentile", method="percentile", facts=PassFacts(
    runtime="onnxruntime", precision="int8", requires=ORT, priors=STATIC_PRIORS,
    cost=QuantizeCost("static"), plans=(InPlan("tensor", "full", 7),),
    summary="static INT8 (QDQ) calibrated by percentile"))
class OrtStaticInt8Pass(OrtDerivedPass):
    source = "ort_fused"
    fallback_source = "ort_fp32"
    precision = "int8"

    def __init__(self, method: Method = "minmax", per_channel: bool = True) -> None:
        self.method = method
        self.per_channel = per_channel
        self.name = f"ort_int8_static_{method}"

    def settings(self) -> StaticInt8Settings:
        return StaticInt8Settings(calibration=self.method, per_channel=self.per_channel)

    def applies(self, ctx: PassContext) -> str | None:
        if not ctx.calibration:
            return "static INT8 needs held-out inputs to calibrate on; pass --data"
        return None

    def transform(self, src: Path, dst: Path, ctx: PassContext, record: PassRecord) -> None:
        import onnx
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, quantize_static
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        inputs = ctx.calibration_inputs()
        record.settings |= replace(self.settings(), calibration_inputs=len(inputs)).to_dict()
        methods = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
                   "percentile": CalibrationMethod.Percentile}
        with tempfile.TemporaryDirectory() as tmp:
            typed = Path(tmp) / "typed.onnx"
            model = SymbolicShapeInference.infer_shapes(onnx.load(str(src)), auto_merge=True)
            if model is None:
                raise NotApplicableError("symbolic shape inference failed on this graph")
            onnx.save(model, str(typed))

            def build(scheme: Int8Scheme, out: Path) -> None:
                with quiet_quantizer():
                    quantize_static(
                        str(typed), str(out), _reader(ctx, inputs, self.method != "minmax"),
                        quant_format=QuantFormat.QDQ,
                        per_channel=self.per_channel, reduce_range=scheme.reduce_range,
                        activation_type=quant_type(scheme.activation),
                        weight_type=quant_type(scheme.weight),
                        calibrate_method=methods[self.method],
                        op_types_to_quantize=list(STATIC_OP_TYPES),
                        calibration_providers=["CPUExecutionProvider"],
                        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})

            choose_int8_scheme(ctx, dst, record, build)


def _reader(ctx: PassContext, inputs: list[Any], same_width: bool) -> Any:
    """A CalibrationDataReader yielding one input at a time. The histogram calibrators merge
    tensors across batches and need equal shapes, so for them every row is padded to one
    width; MinMax reads each input at its own length (no time spent on padding)."""
    from onnxruntime.quantization import CalibrationDataReader

    if same_width:
        feeds = ctx.baseline.preprocess(inputs)  # one batch: every row padded to one width
        rows = [{k: np.ascontiguousarray(v[i:i + 1]) for k, v in feeds.items()}
                for i in range(len(inputs))]
    else:
        rows = [ctx.baseline.preprocess([item]) for item in inputs]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._rows: Iterator[dict[str, np.ndarray]] = iter(rows)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._rows, None)

    return Reader()
