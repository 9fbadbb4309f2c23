"""A quick check of named variants for ``advise --measure``: build each in a temporary folder
and time it against the baseline by interleaved A/B at batch 1. The variants are built here,
in optimize/, and only the measurements leave: report/ turns them into figures and builds
nothing (the CLI hands this function to the report builder)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infertune.hardware import HardwareInfo, detect
from infertune.measure.compare import ComparisonResult, run_interleaved
from infertune.models import load
from infertune.models.adapter import Adapter
from infertune.models.variant import Agreement
from infertune.optimize.passes import build_variants
from infertune.optimize.passes.base import PassContext

UNTIMED_FIRST_CALLS = 3


@dataclass
class VariantCheck:
    """One pass: its A/B against the baseline and its build-time agreement, or why not."""

    pass_name: str
    comparison: ComparisonResult | None = None
    agreement: Agreement | None = None
    skipped: str | None = None


CheckVariants = Callable[[Adapter, Sequence[Any], Sequence[str], float, HardwareInfo | None],
                         list[VariantCheck]]


def check_variants(adapter: Adapter, inputs: Sequence[Any], names: Sequence[str],
                   budget_s: float, hardware: HardwareInfo | None = None) -> list[VariantCheck]:
    """Build ``names`` from ``adapter`` (calibrated on ``inputs``) and A/B each within
    ``budget_s``; ``hardware`` defaults to this machine."""
    hw = hardware if hardware is not None else detect()
    requests = [[x] for x in inputs]
    checks = []
    with tempfile.TemporaryDirectory(prefix="infertune-measure-") as tmp:
        ctx = PassContext(adapter, hw, Path(tmp), calibration=list(inputs),
                          max_calibration=len(inputs), n_samples=min(16, len(inputs)))
        results = {r.pass_name: r for r in build_variants(adapter, ctx, names=list(names))}
        for name in names:
            result = results[name]
            if not result.built or result.path is None:
                checks.append(VariantCheck(name, skipped=result.reason or "not built"))
                continue
            variant = load(Path(result.path))
            # untimed first calls (session allocation): the runner sizes its blocks from its
            # own warm-up pace, which one slow first call would shrink to a few requests
            for req in requests[:UNTIMED_FIRST_CALLS]:
                variant.predict(req)
            cmp = run_interleaved(adapter.predict, variant.predict, requests,
                                  budget_s=budget_s, names=("baseline", name))
            agreement = result.manifest.agreement if result.manifest is not None else None
            checks.append(VariantCheck(name, cmp, agreement))
    return checks
