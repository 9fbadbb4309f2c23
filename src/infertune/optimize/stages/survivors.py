"""Stage "confirm survivors" of ``optimize``: the survivors of screening measured properly,
interleaved against the baseline, each side in a timing process of its own where it can be.
It refines the screen's ScreenArtifact: the candidates come back with the dominated and failing
ones marked dropped and the survivors' proper timings, and the new artifact replaces the
screen's."""

from __future__ import annotations

import dataclasses
from contextlib import ExitStack
from pathlib import Path

from infertune.jsonfile import write_json
from infertune.measure.arm_process import ArmFailed, ArmProcess
from infertune.measure.compare import run_interleaved
from infertune.optimize.findings import ScreenArtifact
from infertune.optimize.search.budget import NEED_PROPER_S, NEED_QUICK_S, Budget, Progress
from infertune.optimize.search.timing import (
    Candidate,
    Timing,
    measure_against_baseline,
    select_survivors,
)
from infertune.optimize.state import RunState, StageContext

# the mark (a fraction of the whole budget, as build.py's MARK_BUILD) by which the survivors'
# interleaved measurements should end
MARK_CONFIRM = 0.80


def run(ctx: StageContext) -> ScreenArtifact:
    """Measure the survivors properly, interleaved against the baseline: each side in its own
    process, as each will be served (not with --quick: two process starts cost more than its
    whole comparison, so both sides run here and the figure says so). Returns the screen's
    candidates (copies: the screen's artifact is not changed) with what this stage decided."""
    state = ctx.state
    # copies, which select_survivors marks dropped and the timings below fill in
    found = ScreenArtifact(candidates=[dataclasses.replace(c) for c in state.screen.candidates])
    keep = 1 if state.options.quick else 3
    _measure(state, ctx.budget, ctx.progress, select_survivors(found.candidates, keep=keep))
    return found


def _measure(state: RunState, budget: Budget, progress: Progress,
             survivors: list[Candidate]) -> None:
    """Each survivor's proper timing (``cand.proper``) and its latency.json, within the
    stage's share of the budget."""
    with ExitStack() as stack:
        baseline_arm = None
        if survivors and not state.options.quick:
            progress.tick("loading the baseline in a timing process of its own")
            baseline_arm = _arm(state, state.options.model, "the baseline")
            if baseline_arm is not None:
                stack.enter_context(baseline_arm)
        for i, cand in enumerate(survivors):
            remaining = len(survivors) - i
            left = max(budget.until(MARK_CONFIRM), budget.share(0.15))
            per = min(left / remaining, 8.0 if state.options.quick else 40.0)
            if per < NEED_PROPER_S and not (state.options.quick and per >= NEED_QUICK_S):
                state.skip(f"interleaved measurement of {cand.variant_id}",
                           f"only {per:.0f} s left for it; the quick figure stands",
                           NEED_PROPER_S)
                continue
            progress.tick(f"interleaved trials: {cand.variant_id} vs baseline")
            built = state.build.built_variant(cand.variant_id)
            folder = built.path if built is not None else None
            cand.proper = _proper_timing(state, cand.variant_id, folder, baseline_arm, per)
            if folder is not None:
                write_json(folder / "latency.json",
                           {"quick": cand.quick.to_dict() if cand.quick else None,
                            "proper": cand.proper.to_dict()})


def _proper_timing(state: RunState, variant_id: str, folder: Path | None,
                   baseline_arm: ArmProcess | None, budget_s: float) -> Timing:
    """The interleaved comparison, in two processes when the baseline runs in one and the
    variant loads in another; else both here (Timing.where says which)."""
    seed = state.options.seed + 1
    arm = (_arm(state, str(folder), variant_id)
           if baseline_arm is not None and folder is not None else None)
    if baseline_arm is not None and arm is not None:
        with arm:
            try:
                return measure_against_baseline(
                    run_interleaved, baseline_arm, arm, variant_id, state.requests,
                    kind="proper", budget_s=budget_s, seed=seed, own_processes=True)
            except ArmFailed as exc:
                state.log.notes.append(f"{variant_id} timed against the baseline in this process: "
                                   f"{exc}")
    adapter = state.adapters[variant_id]
    timing = measure_against_baseline(
        run_interleaved, state.baseline.predict, adapter.predict, variant_id, state.requests,
        kind="proper", budget_s=budget_s, seed=seed)
    del adapter  # so loading the next survivor frees this one (VariantAdapters)
    return timing


def _arm(state: RunState, ref: str, what: str) -> ArmProcess | None:
    """``ref`` loaded in a timing process of its own, or None (with a note) when it cannot be."""
    try:
        return ArmProcess(ref)
    except (ArmFailed, OSError) as exc:
        state.log.notes.append(f"{what} could not be loaded in a process of its own ({exc}); its "
                           "interleaved comparison ran both sides in this process")
        return None
