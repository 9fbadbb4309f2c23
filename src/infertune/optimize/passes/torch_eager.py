"""Torch eager fp32: the baseline itself, saved as a self-contained variant."""

from __future__ import annotations

from infertune.models.variant import TorchRecipe
from infertune.optimize.passes._torch import TorchVariantPass


class TorchEagerPass(TorchVariantPass):
    name = "torch_fp32"
    precision = "fp32"
    recipe = TorchRecipe(dtype="fp32", mode="eager")
