"""Torch eager fp32: the baseline itself, saved as a self-contained variant."""

from __future__ import annotations

from infertune.models.variant import TorchRecipe
from infertune.optimize.passes._torch import TorchVariantPass
from infertune.optimize.passes.facts import (
    TORCH_COPY_RATIO,
    ExportCost,
    InPlan,
    PassFacts,
    Prior,
    Requires,
    everywhere,
)
from infertune.optimize.passes.registry import register


@register("torch_fp32", facts=PassFacts(
    runtime="torch", precision="fp32", requires=Requires(
        libraries=("torch", "transformers"), model_kinds=("text",)),
    priors=everywhere(Prior(1.0, 0.05, 1.0, "the baseline itself")),
    cost=ExportCost(TORCH_COPY_RATIO), plans=(InPlan("text", "quick", 0),),
    summary="the eager baseline, saved as a variant"))
class TorchEagerPass(TorchVariantPass):
    name = "torch_fp32"
    precision = "fp32"
    recipe = TorchRecipe(dtype="fp32", mode="eager")
