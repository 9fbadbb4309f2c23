"""Fixtures for the optimize tests: the tiny BERT built once per session, and every pass
built on it once (fixed seeds, simulated VNNI + BF16 CPU without GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
from optimize_tiny_helpers import SENTENCES, hardware, make_tiny_bert, tiny_registry


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny_bert") / "model")


@pytest.fixture(scope="session")
def tiny_adapter(tiny_bert: Path):
    from infertune.models import load

    return load(tiny_bert, task="embedding")


@pytest.fixture(scope="session")
def built_all(tiny_adapter, tmp_path_factory: pytest.TempPathFactory):
    """Every registered pass built once on the tiny model (VNNI + BF16 CPU, no GPU)."""
    from infertune.optimize import PassContext, QualityTarget, build_variants

    hw = hardware(["avx2", "avx512f", "avx512_vnni", "avx512_bf16"])
    ctx = PassContext(tiny_adapter, hw, tmp_path_factory.mktemp("variants"), SENTENCES,
                      quality=QualityTarget(min_mean_cosine=0.99))
    results = build_variants(tiny_adapter, ctx, registry=tiny_registry())
    return ctx, {r.pass_name: r for r in results}
