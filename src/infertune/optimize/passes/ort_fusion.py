"""onnxruntime's transformer optimizer (model_type "bert"): fuses Attention,
SkipLayerNormalization, BiasGelu and EmbedLayerNormalization in the saved graph.

The manifest's op_counts are read back from the saved file, so a fusion that did not happen
shows as absent, and a note says so when no Attention node was fused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infertune.errors import NotApplicableError
from infertune.models.variant import Manifest, PassRecord
from infertune.optimize.passes._onnx import OrtDerivedPass
from infertune.optimize.passes._text import hf_reason
from infertune.optimize.passes.base import PassContext

# Hugging Face model types whose encoder layout the "bert" fusion patterns match.
BERT_LIKE = ("bert", "roberta", "xlm-roberta", "distilbert", "camembert", "electra", "mpnet")


class OrtFusionPass(OrtDerivedPass):
    name = "ort_fused"
    source = "ort_fp32"

    def settings(self) -> dict[str, Any]:
        return {"optimizer": "onnxruntime.transformers.optimizer", "model_type": "bert",
                "opt_level": 0}

    def applies(self, ctx: PassContext) -> str | None:
        reason = hf_reason(ctx.baseline)
        if reason:
            return reason
        model_type = _hf_config(ctx).model_type
        if model_type not in BERT_LIKE:
            return f"the transformer optimizer's bert fusions do not cover {model_type!r} models"
        return None

    def transform(self, src: Path, dst: Path, ctx: PassContext, record: PassRecord) -> None:
        from onnxruntime.transformers import optimizer

        config = _hf_config(ctx)
        # opt_level 0: only the python fusions here; the session applies its own levels at load
        model = optimizer.optimize_model(
            str(src), model_type="bert", num_heads=config.num_attention_heads,
            hidden_size=config.hidden_size, opt_level=0)
        stats = {k: v for k, v in model.get_fused_operator_statistics().items() if v}
        if not stats:
            raise NotApplicableError("the transformer optimizer fused nothing in this graph")
        record.settings["optimizer_reported"] = stats
        model.save_model_to_file(str(dst))

    def update(self, manifest: Manifest, ctx: PassContext, record: PassRecord) -> None:
        if not manifest.op_counts.get("Attention"):
            attn = manifest.passes[0].settings.get("attn_implementation")
            manifest.notes.append(f"no Attention node was fused (export used {attn!r} attention)")


def _hf_config(ctx: PassContext) -> Any:
    return ctx.baseline.runner.module.config  # type: ignore[attr-defined]
