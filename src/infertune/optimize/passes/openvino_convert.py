"""OpenVINO f32 and bf16: the ONNX export converted to OpenVINO IR (model.xml/.bin, weights
kept in f32) and compiled with the precision set explicitly.

bf16 is built only where the CPU computes BF16 natively (AMX or avx512_bf16). The IR is the
same file for both; the precision is the compile-time ``INFERENCE_PRECISION_HINT``, read back
from the compiled model and refused when it is not the one asked for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from infertune.errors import NotApplicableError
from infertune.models.openvino_runner import OpenVinoSettings, OvRunner, convert_onnx
from infertune.models.variant import PassRecord
from infertune.optimize.passes._priors import AMX_BATCH16_FP32, AMX_HAND
from infertune.optimize.passes.base import PassContext, PassSettings
from infertune.optimize.passes.facts import (
    MEASURED_SPREAD,
    InPlan,
    PassFacts,
    Prior,
    Priors,
    Requires,
)
from infertune.optimize.passes.openvino_common import (
    BF16_FLAGS,
    XML_FILE,
    OpenVinoCost,
    bf16_reason,
    choose_shapes,
    new_ir_folder,
    openvino_reason,
    read_back,
    serve_threads,
)
from infertune.optimize.passes.registry import register
from infertune.optimize.passes.variant_files import Variant, finalize

Precision = Literal["fp32", "bf16"]
HINTS: dict[Precision, Literal["f32", "bf16"]] = {"fp32": "f32", "bf16": "bf16"}


@dataclass(frozen=True)
class OpenVinoConvertSettings(PassSettings):
    """The conversion asked for; the record adds, at build, the precision read back
    (read_back), the threads (serve_threads) and the shape choice (choose_shapes)."""

    precision_hint: Literal["f32", "bf16"]
    converter: str = "openvino.convert_model from the ONNX export"
    compress_to_fp16: bool = False


@register("openvino_fp32", facts=PassFacts(
    runtime="openvino", precision="fp32", requires=Requires(
        libraries=("openvino",), model_kinds=("text",)),
    priors=Priors({"amx": Prior(1.18, MEASURED_SPREAD, 1.0, AMX_HAND,
                                batched=239 / AMX_BATCH16_FP32)}),
    cost=OpenVinoCost(), plans=(InPlan("text", "full", 10),),
    summary="the ONNX export as OpenVINO IR, compiled in f32"))
# bf16: 1.30x at p95 but 2.44x at p50 at batch 1 (its tail: recompiling new sequence lengths),
# and 3.1x torch fp32's texts/s at batch 16 (700 against 225) in the same hand measurement
@register("openvino_bf16", precision="bf16", facts=PassFacts(
    runtime="openvino", precision="bf16", requires=Requires(
        cpu_flags_any=BF16_FLAGS, libraries=("openvino",), model_kinds=("text",),
        why="elsewhere OpenVINO emulates bf16 or runs it as f32"),
    priors=Priors({"amx": Prior(1.30, MEASURED_SPREAD, 0.95, AMX_HAND,
                                batched=700 / AMX_BATCH16_FP32)}),
    cost=OpenVinoCost(), plans=(InPlan("text", "full", 11),),
    summary="the OpenVINO IR compiled with a bf16 inference precision"))
class OpenVinoPass:
    source: str | None = "ort_fp32"
    fallback_source: str | None = None

    def __init__(self, precision: Precision = "fp32") -> None:
        self.precision = precision
        self.name = f"openvino_{precision}"

    def settings(self) -> OpenVinoConvertSettings:
        return OpenVinoConvertSettings(HINTS[self.precision])

    def applies(self, ctx: PassContext) -> str | None:
        reason = openvino_reason(ctx)
        if reason is None and self.precision == "bf16":
            reason = bf16_reason(ctx.hardware)
        return reason

    def apply(self, source: Variant | None, ctx: PassContext) -> Variant:
        if source is None or source.manifest.runtime != "onnxruntime":
            raise NotApplicableError(f"{self.name} needs the ONNX export (ort_fp32)")
        folder, manifest = new_ir_folder(source, ctx, self.name)
        record = PassRecord(self.name, self.settings().to_dict())
        convert_onnx(source.path / source.manifest.model_file, folder / XML_FILE)
        settings = OpenVinoSettings(precision_hint=HINTS[self.precision],
                                    output_sequence_axis=manifest.task == "embedding")
        settings = serve_threads(settings, ctx, record)
        settings = choose_shapes(folder / XML_FILE, settings, manifest, ctx, record)
        manifest.precision = read_back(OvRunner(str(folder / XML_FILE), settings), record,
                                       self.precision)
        manifest.openvino = settings
        manifest.passes.append(record)
        return finalize(folder, manifest)
