"""Shared helpers for passes over a Hugging Face text baseline (TextAdapter + TorchRunner)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infertune.errors import NotApplicableError
from infertune.models.adapter import Adapter
from infertune.models.loaders import sha256_files
from infertune.models.text import TextAdapter
from infertune.models.variant import InputSpec, Manifest, PassRecord, Preprocessing
from infertune.optimize.passes.base import PassContext

TOKENIZER_DIR = "tokenizer"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".onnx")


def hf_reason(baseline: Adapter) -> str | None:
    """None when the baseline is a Hugging Face text model run by torch; else why not."""
    if not isinstance(baseline, TextAdapter):
        info = baseline.info
        return f"needs a Hugging Face text model; {info.id} is a {info.kind} model"
    module = getattr(baseline.runner, "module", None)
    if module is None or not hasattr(module, "save_pretrained"):
        return (f"needs the torch Hugging Face baseline; {baseline.info.id} runs on "
                f"{baseline.info.runtime}")
    return None


def require_hf(baseline: Adapter) -> tuple[Any, Any]:
    """(module, tokenizer) of a Hugging Face text baseline, or NotApplicableError."""
    reason = hf_reason(baseline)
    if reason is not None:
        raise NotApplicableError(reason)
    return baseline.runner.module, baseline.tokenizer  # type: ignore[attr-defined]


def save_tokenizer(baseline: Adapter, folder: Path) -> str:
    _, tokenizer = require_hf(baseline)
    tokenizer.save_pretrained(str(folder / TOKENIZER_DIR))
    return TOKENIZER_DIR


def source_sha256(ctx: PassContext) -> str:
    """SHA-256 over the baseline's weight files (names and bytes, sorted), computed once."""

    def make() -> str:
        source = Path(ctx.baseline.info.source)
        files = ([p for p in source.iterdir() if p.suffix in WEIGHT_SUFFIXES]
                 if source.is_dir() else [source] if source.is_file() else [])
        return sha256_files(files) if files else ""

    return ctx.cached("source_sha256", make)


def text_manifest(ctx: PassContext, *, variant_id: str, runtime: str, precision: str,
                  model_file: str, passes: list[PassRecord], tokenizer_dir: str) -> Manifest:
    """A manifest carrying the baseline's preprocessing and provenance."""
    base = ctx.baseline
    pre = base.pre  # type: ignore[attr-defined]
    dyn = {"0": "batch", "1": "sequence"}
    return Manifest(
        id=variant_id, runtime=runtime, precision=precision,  # type: ignore[arg-type]
        kind="text", task=base.info.task, model_file=model_file, passes=passes,
        inputs=[InputSpec(name, "int64", dict(dyn)) for name in base.info.input_names],
        output_name="last_hidden_state" if base.info.task == "embedding" else "logits",
        preprocessing=Preprocessing(tokenizer_dir=tokenizer_dir, max_length=pre.max_length,
                                    padding=pre.padding, buckets=list(pre.buckets),
                                    truncation=pre.truncation),
        source={"ref": base.info.source, "model_id": base.info.id,
                "sha256": source_sha256(ctx)},
        max_position=base.info.max_position,
    )
