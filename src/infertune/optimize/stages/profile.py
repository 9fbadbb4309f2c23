"""Stages "profile baseline" and "reference outputs" of ``optimize``: the baseline's
profile (profile.json), which completes setup's ProfileArtifact (``run``); then its outputs on
the quality subset (what every variant is judged against) and its screening samples, timed
before any variant loads (``reference_outputs``: live handles and the log's cost facts, kept on
the RunState, so it returns no artifact). The screening timings' sizes (``quick_s``,
``batch_s``) and ``served_curve`` are shared with stage "screen variants" (screen.py)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from infertune.jsonfile import write_json
from infertune.measure.profile import ProfileSettings, profile
from infertune.optimize.findings import ProfileArtifact
from infertune.optimize.search.budget import NEED_QUICK_S, Budget
from infertune.optimize.search.costs import CostFacts
from infertune.optimize.search.screening import (
    BatchPoint,
    ScreenCurve,
    scenario_batches,
    time_batches,
)
from infertune.optimize.search.sizing import PROFILE_SHARE, fit_profile, params_m
from infertune.optimize.search.timing import time_alone
from infertune.optimize.state import RunState, StageContext
from infertune.quality import run_outputs

NEED_PROFILE_S = 15.0
NEED_REFERENCE_S = 5.0
CALIBRATION = 128  # the held-out inputs INT8 passes calibrate and score on (search/builder.py)


def run(ctx: StageContext) -> ProfileArtifact:
    """Setup's ProfileArtifact (the machine) with the baseline's profile (profile.json)."""
    state, budget, progress = ctx.state, ctx.budget, ctx.progress
    if not budget.allows(NEED_PROFILE_S):
        state.skip("baseline profile", "time budget exhausted", NEED_PROFILE_S)
        return state.profiling
    quick = state.options.quick or budget.left() < 120
    settings = ProfileSettings(
        batch_sizes=(1,) if quick else (1, 4, 16), requests=40 if quick else 200,
        rounds=2 if quick else 3, stage_seconds=5.0 if quick else 12.0,
        min_round_requests=10 if quick else 25, warmup=3 if quick else 10,
        curve_repeats=3 if quick else 5, curve_seconds=2.0 if quick else 6.0,
        hotspot_calls=1 if quick else 2, cold_start=not quick and budget.left() > 240,
        seed=state.options.seed)
    settings = fit_profile(state, settings, PROFILE_SHARE * budget.total_s)
    ref = state.options.model
    hw = state.profiling.hardware
    measured = profile(
        state.baseline, state.options.data.inputs, settings=settings,
        model_ref=ref if settings.cold_start else None, data_source=state.options.data.source,
        progress=lambda step, done, total: progress.tick(f"{step} {done}/{total}"),
        hardware=None if hw is None else hw.to_dict())
    write_json(state.paths.profile, measured.to_dict())
    return dataclasses.replace(state.profiling, profile=measured)


def reference_outputs(ctx: StageContext) -> None:
    """The baseline's outputs on the quality subset and its screening samples, onto the state
    (live handles, no findings), and the cost facts measured on the way, into the log."""
    state, budget, progress = ctx.state, ctx.budget, ctx.progress
    if not budget.allows(NEED_REFERENCE_S):
        state.skip("quality reference outputs", "time budget exhausted", NEED_REFERENCE_S)
        return
    progress.tick(f"baseline outputs on {len(state.quality_inputs)} held-out inputs")
    # in two parts, timed apart: the first CALIBRATION inputs (the shortest, as the list is
    # sorted) are what INT8 passes score on, the whole list what every quality run costs
    ms: list[float] = []
    parts: list[np.ndarray] = []
    for chunk in (state.quality_inputs[:CALIBRATION], state.quality_inputs[CALIBRATION:]):
        if chunk:
            started = time.perf_counter()
            parts.append(run_outputs(state.baseline, chunk, batch_size=16,
                                     source=state.options.data.source))
            ms.append((time.perf_counter() - started) * 1000.0)
    state.reference = np.concatenate(parts)
    n_cal = min(len(state.quality_inputs), CALIBRATION)
    item_ms = sum(ms) / max(len(state.quality_inputs), 1)
    cal_item_ms = ms[0] / max(n_cal, 1)
    # The baseline's batch-1 screening samples, timed now, before any variant loads: an
    # onnxruntime session in this process keeps spinning threads that slow an eager torch
    # baseline timed after it far more than the variant (issue 14: 2.3x vs 5.3x on one pair).
    progress.tick("timing the baseline alone for screening")
    state.base_samples = time_alone(state.baseline.predict, state.requests,
                                    budget_s=quick_s(budget), min_n=20)
    # and at the batch sizes serving forms, for the same reason (search/screening.py)
    progress.tick("timing the baseline at the batch sizes serving forms")
    state.base_curve = served_curve(state, state.baseline.predict, state.base_samples,
                                     batch_s(budget))
    # the measured times every later step's cost is scaled from (search/costs.py)
    state.log.cost_facts = CostFacts(call_ms=float(np.median(state.base_samples)), item_ms=item_ms,
                                 cal_item_ms=cal_item_ms, params_m=params_m(state),
                                 n_quality=len(state.quality_inputs))


def quick_s(budget: Budget) -> float:
    return min(max(NEED_QUICK_S / 2, budget.left() * 0.02), 6.0)


def batch_s(budget: Budget) -> float:
    """Seconds for a variant's batched points: a few calls each is enough to see a loss of
    more than the margin (screening.MARGIN) on full batches."""
    return min(quick_s(budget) / 4, 1.0)


def served_batches(state: RunState) -> list[int]:
    """The sweep's batch sizes this scenario's traffic can form (screening.formable_batches):
    its peak rate within its loosest latency target."""
    cores = state.profiling.hardware.effective_cores if state.profiling.hardware is not None else 1
    return scenario_batches(state.options.scenario, cores, state.options.quick)


def served_curve(state: RunState, call: Callable[[Sequence[Any]], Any],
                  batch1_ms: Sequence[float], budget_s: float) -> ScreenCurve:
    """Batch 1 from the sequential timing's samples, the larger sizes timed now."""
    larger = [b for b in served_batches(state) if b > 1]
    curve = time_batches(call, state.options.data.inputs, larger, budget_s=budget_s,
                         seed=state.options.seed)
    if batch1_ms:
        curve = curve.with_point(BatchPoint(1, float(np.median(batch1_ms)), len(batch1_ms)))
    return curve
