"""Torch BF16 autocast: matmuls in bfloat16, reductions in fp32 (autocast's own op lists).

On CPU it pays only with native BF16 (avx512_bf16 or AMX); without them BF16 is emulated
and slower than fp32, so the pass refuses. On a GPU it runs on cuda."""

from __future__ import annotations

import dataclasses

from infertune.models.variant import TorchRecipe
from infertune.optimize.passes._priors import AMX_BATCH16_FP32, AMX_HAND
from infertune.optimize.passes._torch import TorchVariantPass, device_for
from infertune.optimize.passes.base import PassContext
from infertune.optimize.passes.facts import (
    MEASURED_SPREAD,
    TORCH_COPY_RATIO,
    ExportCost,
    InPlan,
    PassFacts,
    Prior,
    Priors,
    Requires,
)
from infertune.optimize.passes.registry import register
from infertune.optimize.passes.variant_files import Variant

BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@register("torch_bf16", facts=PassFacts(
    runtime="torch", precision="bf16", requires=Requires(
        cpu_flags_any=BF16_FLAGS, or_gpu_capability=8.0, libraries=("torch", "transformers"),
        model_kinds=("text",), why="elsewhere bf16 is emulated, slower than fp32"),
    # at batch 16 the same hand measurement found 426 texts/s against torch fp32's 225
    priors=Priors({"amx": Prior(0.74, MEASURED_SPREAD, 0.9, AMX_HAND,
                                batched=426 / AMX_BATCH16_FP32)}),
    cost=ExportCost(TORCH_COPY_RATIO), plans=(InPlan("text", "full", 7),),
    summary="torch autocast to bf16"))
class TorchBf16Pass(TorchVariantPass):
    name = "torch_bf16"
    precision = "bf16"
    recipe = TorchRecipe(dtype="bf16", mode="autocast")

    def _reason(self, ctx: PassContext) -> str | None:
        if device_for(ctx) == "cuda" or any(ctx.hardware.has(f) for f in BF16_FLAGS):
            return None
        return ("BF16 on this CPU would be emulated (no avx512_bf16 or amx_bf16 flag) and no "
                "GPU is available")

    def apply(self, source: Variant | None, ctx: PassContext) -> Variant:
        self.recipe = dataclasses.replace(self.recipe, device=device_for(ctx))
        return super().apply(source, ctx)
