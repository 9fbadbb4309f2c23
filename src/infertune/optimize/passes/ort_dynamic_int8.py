"""onnxruntime dynamic INT8: weights quantized offline, activations per batch at run time.

Per-tensor uses one scale per weight matrix; per-channel one per output column, which keeps
more accuracy for the same kernels. Activation/weight types follow the CPU (see int8_schemes)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from infertune.errors import NotApplicableError
from infertune.models.variant import PassRecord
from infertune.optimize.passes._onnx import (
    ORT,
    Int8Scheme,
    Int8Settings,
    OrtDerivedPass,
    choose_int8_scheme,
    op_counts,
    quant_type,
    quiet_quantizer,
)
from infertune.optimize.passes._priors import AMX_BATCH16_FP32, AMX_HAND, VNNI_KB, int8_priors
from infertune.optimize.passes.base import PassContext
from infertune.optimize.passes.facts import (
    MEASURED_SPREAD,
    InPlan,
    PassFacts,
    Prior,
    Priors,
    QuantizeCost,
)
from infertune.optimize.passes.registry import register

# measured on AVX2 (per-channel passed the 0.99 floor there: 0.993), on VNNI, and on the AMX
# Xeon: 2.91x at batch 1, 474 texts/s at batch 16 (torch fp32: 225)
_MEASURED = int8_priors(2.72, 0.8, VNNI_KB)
DYNAMIC_OP_TYPES = ("MatMul", "Attention")


@dataclass(frozen=True, kw_only=True)
class DynamicInt8Settings(Int8Settings):
    per_channel: bool
    op_types: tuple[str, ...] = DYNAMIC_OP_TYPES


PER_CHANNEL_PRIORS = Priors(
    {**_MEASURED.by_path, "amx": Prior(2.91, MEASURED_SPREAD, 0.8, AMX_HAND,
                                       batched=474 / AMX_BATCH16_FP32)}, _MEASURED.default)


@register("ort_int8_dynamic_per_channel", per_channel=True, facts=PassFacts(
    runtime="onnxruntime", precision="int8", requires=ORT, priors=PER_CHANNEL_PRIORS,
    cost=QuantizeCost("dynamic"),
    plans=(InPlan("text", "quick", 3), InPlan("tensor", "quick", 1)), option="int8-cpu",
    summary="INT8 weights per output channel, activations quantized per batch"))
# per-tensor INT8 failed the 0.99 floor on the AVX2 demo (0.984), hence its quality chance
@register("ort_int8_dynamic_per_tensor", per_channel=False, facts=PassFacts(
    runtime="onnxruntime", precision="int8", requires=ORT,
    priors=int8_priors(2.0, 0.4), cost=QuantizeCost("dynamic"),
    plans=(InPlan("text", "full", 8), InPlan("tensor", "full", 6)),
    summary="INT8 weights per tensor, activations quantized per batch"))
class OrtDynamicInt8Pass(OrtDerivedPass):
    source = "ort_fused"
    fallback_source = "ort_fp32"
    precision = "int8"

    def __init__(self, per_channel: bool = True) -> None:
        self.per_channel = per_channel
        self.name = f"ort_int8_dynamic_{'per_channel' if per_channel else 'per_tensor'}"

    def settings(self) -> DynamicInt8Settings:
        return DynamicInt8Settings(per_channel=self.per_channel)

    def transform(self, src: Path, dst: Path, ctx: PassContext, record: PassRecord) -> None:
        def build(scheme: Int8Scheme, out: Path) -> None:
            quantize_dynamic_file(src, out, per_channel=self.per_channel,
                                  weight=scheme.weight, reduce_range=scheme.reduce_range)

        choose_int8_scheme(ctx, dst, record, build)
        # onnxruntime's DynamicQuantizeLinear makes uint8 activations whatever the CPU
        record.settings |= replace(self.settings(), activation_type="uint8").to_dict()
        if not any(op in op_counts(dst) for op in INT8_OPS):
            raise NotApplicableError(
                "no MatMul, Gemm or Attention with constant weights to quantize dynamically (a "
                "convolutional graph takes static INT8 instead)")


# What dynamic quantization writes for the op types it quantizes.
INT8_OPS = ("MatMulInteger", "QAttention", "DynamicQuantizeMatMul")


def quantize_dynamic_file(src: Path, dst: Path, *, per_channel: bool, weight: str,
                          reduce_range: bool, exclude: list[str] | None = None,
                          only: list[str] | None = None) -> None:
    import onnx
    from onnxruntime.quantization import quantize_dynamic

    with quiet_quantizer():
        quantize_dynamic(
            str(src), str(dst), per_channel=per_channel, reduce_range=reduce_range,
            weight_type=quant_type(weight), op_types_to_quantize=list(DYNAMIC_OP_TYPES),
            nodes_to_exclude=exclude or [], nodes_to_quantize=only or [],
            # fused contrib ops defeat ONNX shape inference; their outputs are fp32 tensors
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT,
                           "MatMulConstBOnly": True})
