"""Torch FP16 on CUDA: the weights cast to float16 and the model run on the GPU.

Applies only on an NVIDIA GPU with FP16 tensor cores (compute capability 7.0+) that torch can
see: CPUs lack fast FP16 matmuls, and before Volta FP16 gains little. Whether torch sees the
GPU is injected (``cuda_available``), so the gate is tested on machines without one."""

from __future__ import annotations

from collections.abc import Callable

from infertune.models.gpu import FP16_TENSOR_CORES, fp16_gpu_reason
from infertune.models.variant import TorchRecipe
from infertune.optimize.passes._gpu import GPU_UNMEASURED
from infertune.optimize.passes._torch import TorchVariantPass
from infertune.optimize.passes.base import PassContext
from infertune.optimize.passes.facts import (
    TORCH_COPY_RATIO,
    ExportCost,
    InPlan,
    PassFacts,
    Requires,
)
from infertune.optimize.passes.registry import register


def torch_sees_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


@register("torch_fp16", facts=PassFacts(
    runtime="torch", precision="fp16", device="gpu", requires=Requires(
        gpu_capability=FP16_TENSOR_CORES, libraries=("torch", "transformers"),
        model_kinds=("text",), why="FP16 tensor cores (Volta+); CPUs lack fast FP16 matmuls"),
    priors=GPU_UNMEASURED, cost=ExportCost(TORCH_COPY_RATIO),
    plans=(InPlan("text", "full", 14),), summary="torch FP16 on CUDA"))
class TorchFp16Pass(TorchVariantPass):
    name = "torch_fp16"
    precision = "fp16"
    recipe = TorchRecipe(dtype="fp16", mode="cast", device="cuda")

    def __init__(self, cuda_available: Callable[[], bool] | None = None) -> None:
        self._cuda_available = cuda_available or torch_sees_cuda

    def _reason(self, ctx: PassContext) -> str | None:
        reason = fp16_gpu_reason(ctx.hardware)
        if reason is not None:
            return reason
        if not self._cuda_available():
            return ("torch cannot see the GPU (a CPU-only torch build, or no CUDA driver); "
                    "install a CUDA build of torch")
        return None
