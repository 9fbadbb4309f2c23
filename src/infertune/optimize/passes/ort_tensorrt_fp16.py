"""onnxruntime on the TensorRT provider, FP16, with an engine cache and one shape profile.

The graph stays the plain fp32 export (TensorRT parses standard ONNX ops, not onnxruntime's
fused contrib ops, and picks FP16 kernels itself under trt_fp16_enable), with every tensor's
shape inferred symbolically: TensorRT subgraphs need their input shapes, and nodes TensorRT
does not take run on CUDA. The profile's opt shape comes from the traffic's token lengths
(the calibration inputs); min and max cover every shape the preprocessing can produce
(models/gpu.py trt_profile). Engines are built on first load and cached outside the variant."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from infertune.models.gpu import GpuProvider, OrtGpuSettings, TrtProfile, trt_profile
from infertune.models.text import TextAdapter
from infertune.models.variant import Manifest, PassRecord
from infertune.optimize.passes._gpu import (
    GPU_UNMEASURED,
    ORT_GPU,
    GpuPassSettings,
    OrtGpuPass,
    ProvidersFn,
)
from infertune.optimize.passes.base import PassContext, built
from infertune.optimize.passes.facts import UNKNOWN_COST, InPlan, PassFacts
from infertune.optimize.passes.registry import register


@dataclass(frozen=True, kw_only=True)
class TensorrtSettings(GpuPassSettings):
    """The engine options asked for, and (at build) symbolic_shapes and the traffic profile."""

    max_batch: int
    opt_batch: int
    provider: GpuProvider = "tensorrt"
    trt_fp16_enable: bool = True
    engine_cache: bool = True
    io_binding: bool = True
    symbolic_shapes: bool | None = built()
    profile: dict[str, str] | None = built()  # the trt_profile_* provider options


@register("ort_tensorrt_fp16", facts=PassFacts(
    runtime="onnxruntime", precision="fp16", device="gpu", requires=ORT_GPU,
    # not measured: the shape inference is quick, but TensorRT builds its engines at the
    # first load (in the build check), which on a GPU takes minutes for an encoder
    priors=GPU_UNMEASURED, cost=UNKNOWN_COST,
    plans=(InPlan("text", "full", 13), InPlan("tensor", "full", 9)),
    summary="onnxruntime TensorRT provider, FP16 engines cached, a profile from the traffic"))
class OrtTensorrtFp16Pass(OrtGpuPass):
    name = "ort_tensorrt_fp16"
    provider = "tensorrt"

    def __init__(self, available: ProvidersFn | None = None, max_batch: int = 32,
                 opt_batch: int = 16) -> None:
        super().__init__(available)
        # the sweep's batch sizes go up to 16 (optimize/served/policy_sweep.py); 32 leaves serve
        # headroom, and the runner splits anything larger into profile-sized chunks
        self.max_batch = max_batch
        self.opt_batch = opt_batch

    def settings(self) -> TensorrtSettings:
        return TensorrtSettings(max_batch=self.max_batch, opt_batch=self.opt_batch)

    def transform(self, src: Path, dst: Path, ctx: PassContext, record: PassRecord) -> None:
        import onnx
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        inferred = SymbolicShapeInference.infer_shapes(onnx.load(str(src)), auto_merge=True)
        onnx.save(inferred, str(dst))
        record.settings |= replace(self.settings(), symbolic_shapes=True).to_dict()

    def gpu_settings(self, manifest: Manifest, ctx: PassContext,
                     record: PassRecord) -> OrtGpuSettings:
        profile = traffic_profile(ctx, [i.name for i in manifest.inputs], self.max_batch,
                                  self.opt_batch)
        if profile is None:
            manifest.notes.append("no token inputs: TensorRT builds an engine for each new "
                                  "input shape on first sight (no explicit profile)")
        else:
            record.settings |= replace(self.settings(),
                                       profile=profile.provider_options()).to_dict()
            manifest.notes.append(
                f"TensorRT profile tuned for batch {self.opt_batch} x "
                f"{profile.opt_shapes[manifest.inputs[0].name][1]} tokens (traffic p50 "
                f"{profile.traffic['p50']:g}, p95 {profile.traffic['p95']:g} over "
                f"{profile.traffic['n']:g} inputs); engines are built on first load")
        return OrtGpuSettings(provider="tensorrt", profile=profile)


def traffic_profile(ctx: PassContext, input_names: list[str], max_batch: int,
                    opt_batch: int) -> TrtProfile | None:
    """The profile from the calibration texts' token lengths; None for a tensor model."""
    base = ctx.baseline
    if not isinstance(base, TextAdapter) or not input_names:
        return None
    lengths = base.token_lengths(ctx.calibration_inputs())
    return trt_profile(input_names, lengths, max_length=base.pre.max_length,
                       max_batch=max_batch, opt_batch=min(opt_batch, max_batch),
                       padded_length=base.pre.padded_length)
