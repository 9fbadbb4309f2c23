"""The shared body of the onnxruntime GPU passes (ort_cuda_fp16, ort_tensorrt_fp16): where they
apply (an NVIDIA GPU with FP16 tensor cores, and the provider in this onnxruntime build), and
the manifest's ``gpu`` settings that models/gpu.py applies at load.

Which providers this onnxruntime has is injected (``available``), so the gates are tested on
machines without a GPU; by default it is onnxruntime's own list, read when a pass is judged."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from infertune.models.gpu import (
    FP16_TENSOR_CORES,
    GpuProvider,
    OrtGpuSettings,
    available_providers,
    fp16_gpu_reason,
    provider_reason,
)
from infertune.models.variant import Manifest, PassRecord
from infertune.optimize.passes._onnx import OrtDerivedPass
from infertune.optimize.passes.base import PassContext, PassSettings
from infertune.optimize.passes.facts import GUESS_SPREAD, Prior, Priors, Requires, everywhere

ProvidersFn = Callable[[], Sequence[str]]

# No GPU has been lent to the sessions that wrote these passes, so nothing is measured yet:
# a neutral prior, as wide as a guess, until benchmarks/gpu_check.py's figures replace it.
GPU_UNMEASURED: Priors = everywhere(Prior(
    1.0, GUESS_SPREAD, 0.95, "no measurement yet (no GPU was lent to measure on): a neutral "
    "prior; benchmarks/gpu_check.py measures it against fp32 eager on the GPU"))
ORT_GPU = Requires(gpu_capability=FP16_TENSOR_CORES, libraries=("onnx", "onnxruntime"),
                   why="FP16 tensor cores (Volta+) and onnxruntime-gpu's GPU providers")


@dataclass(frozen=True)
class GpuPassSettings(PassSettings):
    """What every onnxruntime GPU pass records: its provider (the record adds the GPU it was
    built on: gpu, compute_capability)."""

    provider: GpuProvider


class OrtGpuPass(OrtDerivedPass):
    """Subclasses set name and provider and implement transform() and gpu_settings()."""

    source: str | None = "ort_fp32"
    precision = "fp16"
    provider: GpuProvider = "cuda"

    def __init__(self, available: ProvidersFn | None = None) -> None:
        self._available = available or available_providers

    def applies(self, ctx: PassContext) -> str | None:
        # the hardware first: on a machine without a GPU, onnxruntime is not even asked
        return fp16_gpu_reason(ctx.hardware) or provider_reason(self.provider,
                                                                list(self._available()))

    def gpu_settings(self, manifest: Manifest, ctx: PassContext,
                     record: PassRecord) -> OrtGpuSettings:
        return OrtGpuSettings(provider=self.provider)

    def update(self, manifest: Manifest, ctx: PassContext, record: PassRecord) -> None:
        manifest.gpu = self.gpu_settings(manifest, ctx, record)
        gpu = ctx.hardware.gpus[0] if ctx.hardware.gpus else None
        if gpu is not None:
            record.settings |= {"gpu": gpu.name, "compute_capability": gpu.compute_capability}
        # CPU thread settings size nothing on the GPU; one host thread feeds the device
        manifest.threads.intra_op = 1
        manifest.threads.inter_op = 1

    def settings(self) -> GpuPassSettings:
        return GpuPassSettings(self.provider)
