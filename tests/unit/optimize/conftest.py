"""Fixtures for the optimize tests: the tiny BERT built once per session, and every pass
built on it once (fixed seeds, this machine's CPU described with BF16 added, no GPU)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from cpu_profiles import this_cpu
from optimize_tiny_helpers import SENTENCES, make_tiny_bert, tiny_registry


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny_bert") / "model")


@pytest.fixture(scope="session")
def tiny_adapter(tiny_bert: Path):
    from infertune.models import load

    return load(tiny_bert, task="embedding")


@pytest.fixture(scope="session")
def built_all(tiny_adapter, tmp_path_factory: pytest.TempPathFactory):
    """Every registered pass built once on the tiny model. The CPU is this machine's, because
    INT8 numerics depend on the kernels that really run (U8S8 saturates without VNNI); the
    avx512_bf16 flag is added so the BF16 pass is built everywhere: it only gates whether bf16
    pays off, and PyTorch computes the same bf16 results with or without native support."""
    from infertune.optimize import PassContext, QualityTarget, build_variants

    here = this_cpu()
    hw = replace(here, flags=sorted({*here.flags, "avx512_bf16"}))
    ctx = PassContext(tiny_adapter, hw, tmp_path_factory.mktemp("variants"), SENTENCES,
                      quality=QualityTarget(min_mean_cosine=0.99))
    results = build_variants(tiny_adapter, ctx, registry=tiny_registry())
    return ctx, {r.pass_name: r for r in results}
