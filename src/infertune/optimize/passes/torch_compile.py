"""torch.compile (inductor by default) over the eager fp32 model.

Compilation happens at load, on the first call; check_variant times that first call
(manifest.first_call_s) and refuses the variant when it exceeds ctx.compile_budget_s, because
every process that loads it pays the same start-up cost."""

from __future__ import annotations

from infertune.models.variant import TorchRecipe
from infertune.optimize.passes._torch import TorchSettings, TorchVariantPass
from infertune.optimize.passes.base import PassContext
from infertune.optimize.passes.facts import TORCH_COPY_RATIO, ExportCost, PassFacts, Requires
from infertune.optimize.passes.registry import register


@register("torch_compile", facts=PassFacts(
    runtime="torch", precision="fp32", requires=Requires(
        libraries=("torch", "transformers"), model_kinds=("text",)),
    cost=ExportCost(TORCH_COPY_RATIO, check=True),
    summary="torch.compile (inductor; needs a C++ compiler on CPU), minutes to compile"))
class TorchCompilePass(TorchVariantPass):
    name = "torch_compile"
    precision = "fp32"

    def __init__(self, backend: str = "inductor") -> None:
        # dynamic=True: one graph for all batch sizes and lengths, not a recompile per shape
        self.recipe = TorchRecipe(dtype="fp32", mode="eager", compile=True,
                                  compile_mode="default", compile_dynamic=True,
                                  compile_backend=backend)

    def _reason(self, ctx: PassContext) -> str | None:
        if self.recipe.compile_backend == "inductor" and not ctx.hardware.gpus \
                and not ctx.hardware.cxx_compiler:
            return "torch.compile (inductor) on CPU needs a C++ compiler; none found on PATH"
        return None

    def settings(self) -> TorchSettings:
        return TorchSettings.of(self.recipe,
                                compile_budget_note="first call timed in manifest.first_call_s")
