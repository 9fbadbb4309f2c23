"""Torch dynamic INT8 of every Linear layer via torchao (Int8DynamicActivationInt8Weight).

torch.ao.quantization.quantize_dynamic is deprecated in the pinned torch, so this pass uses
torchao, torch's supported quantization library; without it the pass is skipped."""

from __future__ import annotations

import importlib.util

from infertune.models.variant import TorchRecipe
from infertune.optimize.passes._torch import TorchVariantPass
from infertune.optimize.passes.base import PassContext
from infertune.optimize.passes.facts import TORCH_COPY_RATIO, ExportCost, PassFacts, Requires
from infertune.optimize.passes.registry import register


@register("torch_int8_dynamic", facts=PassFacts(
    runtime="torch", precision="int8", requires=Requires(
        libraries=("torch", "transformers"), model_kinds=("text",)),
    cost=ExportCost(TORCH_COPY_RATIO), summary="torch dynamic INT8 (torchao)"))
class TorchInt8DynamicPass(TorchVariantPass):
    name = "torch_int8_dynamic"
    precision = "int8"
    recipe = TorchRecipe(dtype="fp32", mode="eager", int8_dynamic=True)

    def _reason(self, ctx: PassContext) -> str | None:
        if importlib.util.find_spec("torchao") is None:
            return ("torchao is not installed (torch.ao.quantization.quantize_dynamic is "
                    "deprecated in this torch); pip install torchao to enable it")
        return None
