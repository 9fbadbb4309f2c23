"""Torch FP16 (weights cast to float16): GPU only; CPUs lack fast FP16 matmuls."""

from __future__ import annotations

from infertune.models.variant import TorchRecipe
from infertune.optimize.passes._torch import TorchVariantPass, device_for
from infertune.optimize.passes.base import PassContext


class TorchFp16Pass(TorchVariantPass):
    name = "torch_fp16"
    precision = "fp16"
    recipe = TorchRecipe(dtype="fp16", mode="cast", device="cuda")

    def _reason(self, ctx: PassContext) -> str | None:
        if device_for(ctx) != "cuda":
            return "FP16 needs a CUDA GPU; this machine has none visible to torch"
        return None
