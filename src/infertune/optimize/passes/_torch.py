"""The shared body of the torch passes: save the baseline's weights as safetensors in hf/,
copy the tokenizer in, and write a recipe that models/variant.py re-applies at load."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from infertune.models.variant import PassRecord, TorchRecipe
from infertune.optimize.passes._text import hf_reason, require_hf, save_tokenizer, text_manifest
from infertune.optimize.passes.base import PassContext, PassSettings, built
from infertune.optimize.passes.variant_files import Variant, finalize, fresh_dir

HF_DIR = "hf"


@dataclass(frozen=True)
class TorchSettings(PassSettings, TorchRecipe):
    """A torch pass's record: the recipe it wrote (the manifest's ``recipe`` holds it too)."""

    compile_budget_note: str | None = built()

    @classmethod
    def of(cls, recipe: TorchRecipe, compile_budget_note: str | None = None) -> TorchSettings:
        return cls(**dataclasses.asdict(recipe), compile_budget_note=compile_budget_note)


class TorchVariantPass:
    """Subclasses set name, precision and recipe, and may add hardware rules in _reason."""

    name = "torch_fp32"
    source: str | None = None
    fallback_source: str | None = None
    precision = "fp32"
    recipe = TorchRecipe()

    def settings(self) -> TorchSettings:
        return TorchSettings.of(self.recipe)

    def applies(self, ctx: PassContext) -> str | None:
        return hf_reason(ctx.baseline) or self._reason(ctx)

    def _reason(self, ctx: PassContext) -> str | None:
        return None

    def apply(self, source: Variant | None, ctx: PassContext) -> Variant:
        module, _ = require_hf(ctx.baseline)
        folder = fresh_dir(ctx.out_dir, self.name)
        # safetensors only: a variant never carries a pickle that runs code on load
        module.save_pretrained(str(folder / HF_DIR), safe_serialization=True)
        manifest = text_manifest(
            ctx, variant_id=self.name, runtime="torch", precision=self.precision,
            model_file=HF_DIR, passes=[PassRecord(self.name, self.settings().to_dict())],
            tokenizer_dir=save_tokenizer(ctx.baseline, folder))
        manifest.recipe = self.recipe
        manifest.notes.extend(self.notes(ctx))
        return finalize(folder, manifest)

    def notes(self, ctx: PassContext) -> list[str]:
        return []


def device_for(ctx: PassContext) -> str:
    """cuda when the hardware report lists a GPU and torch can see it; else cpu."""
    if not ctx.hardware.gpus:
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
