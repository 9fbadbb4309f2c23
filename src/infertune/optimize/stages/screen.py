"""Stage "screen variants" of ``optimize``: quick timing (stopping early for a clear loser)
and the quality verdict of every built variant. ``judge`` and ``candidate_from`` are shared with
stage "candidate models" (candidates.py)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from infertune.jsonfile import write_json
from infertune.models.adapter import Adapter
from infertune.optimize.findings import ScreenArtifact
from infertune.optimize.search.budget import NEED_QUICK_S, Budget
from infertune.optimize.search.costs import screen_s
from infertune.optimize.search.screening import ScreenCurve, ServedScreen, update_best
from infertune.optimize.search.screening import judge as judge_batches
from infertune.optimize.search.sequential import StopRule, time_sequential
from infertune.optimize.search.timing import Candidate, quick_timing
from infertune.optimize.stages.profile import NEED_REFERENCE_S, batch_s, quick_s, served_curve
from infertune.optimize.state import RunState, StageContext, quality_floor, quality_metrics
from infertune.quality import QualityResult, evaluate_outputs, run_outputs

# after this mark (a fraction of the whole budget, as build.py's MARK_BUILD) only the first two
# variants are still screened
MARK_SCREEN = 0.68


def judge(state: RunState, adapter: Adapter, variant_id: str,
          folder: Path | None) -> QualityResult:
    """Run ``adapter`` on the quality subset and judge it against the floor (quality.json)."""
    outputs = run_outputs(adapter, state.quality_inputs, batch_size=16,
                          source=state.options.data.source)
    task = state.baseline.info.task
    assert state.reference is not None  # the reference stage ran (callers check)
    result = evaluate_outputs(
        state.reference, outputs, state.quality_labels, quality_floor(state),
        task, quality_metrics(task, state.quality_labels is not None), seed=state.options.seed,
        baseline_name="baseline",
        variant_name=variant_id, data_source=state.options.data.source,
        groups=state.quality_groups)
    if folder is not None:
        result.save(folder / "quality.json")
    return result


def candidate_from(variant_id: str, title: str, result: QualityResult | None) -> Candidate:
    if result is None:
        return Candidate(variant_id, title, "unknown", None, None)
    check = result.floor_check
    return Candidate(variant_id, title, result.verdict, check.estimate,
                     (check.ci_low, check.ci_high))


def run(ctx: StageContext) -> ScreenArtifact:
    """Quick timing and the quality verdict of every built variant, in build order (the order
    of expected gain per second). Batch-1 timing comes first and stops early for a clear loser
    against the fastest passing variant so far (else the baseline); then the variant is timed
    at the batch sizes serving forms (search/screening.py), and only a variant that lost at every
    one of them is pruned, its quality run skipped: it cannot be recommended, so its seconds go to
    the variants that can (search/sequential.py)."""
    state, budget, progress = ctx.state, ctx.budget, ctx.progress
    found = ScreenArtifact()
    screened = 0
    rule = StopRule()
    best: tuple[str, list[float]] | None = None  # fastest passing variant so far, its samples
    best_at: dict[int, tuple[str, float]] = {}  # batch -> fastest passing variant there, ms
    for b in state.build.built:
        if b.skipped or b.is_baseline or b.path is None:
            continue
        need = NEED_QUICK_S + NEED_REFERENCE_S
        # the first two always get screened when any budget is left; later ones only before
        # the screening mark
        if not budget.allows(need) or (screened >= 2 and budget.until(MARK_SCREEN) < need):
            est = (screen_s(b.variant_id, state.log.cost_facts) if state.log.cost_facts is not None
                   else need)
            state.skip(f"screening {b.variant_id}", "its share of the time budget was spent "
                       "on the variants built before it", round(est, 1))
            continue
        screened += 1
        progress.tick(f"screening {b.variant_id}")
        state.adapters.add(b.variant_id, b.path)
        adapter = state.adapters[b.variant_id]  # releases the variant screened before it
        ref_name, ref_ms = (best[0], best[1]) if best is not None else (
            "the baseline", _base_samples(state, len(state.base_samples)))
        var_ms, stopped = time_sequential(adapter.predict, state.requests,
                                          reference_ms=ref_ms, budget_s=quick_s(budget),
                                          rule=rule, reference=ref_name,
                                          seed=state.options.seed)
        served = _screen_served(state, adapter, var_ms, stopped, best_at, budget)
        result = None
        if served.kept and state.reference is not None:
            result = judge(state, adapter, b.variant_id, b.path)
        cand = candidate_from(b.variant_id, b.title, result)
        cand.served = served
        cand.quick = quick_timing(b.variant_id, _base_samples(state, len(var_ms)), var_ms,
                                  seed=state.options.seed)
        state.log.notes.append(f"screening of {b.variant_id} at the batch sizes serving forms: "
                               + served.describe())
        if not served.kept:
            cand.dropped = f"{stopped}; and it lost at every batch size serving forms" \
                if stopped else "it lost at every batch size serving forms"
            state.skip(f"quality of {b.variant_id}", f"not judged: {cand.dropped}")
        elif cand.quality_verdict == "pass":
            update_best(best_at, b.variant_id, served.curve)
            if stopped is None and (
                    best is None or np.median(var_ms) < np.median(best[1][:len(var_ms)])):
                best = (b.variant_id, var_ms)
        write_json(b.path / "latency.json", {"quick": cand.quick.to_dict()})
        found.candidates.append(cand)
        del adapter  # so loading the next variant frees this one (VariantAdapters)
    return found


def _screen_served(state: RunState, adapter: Adapter, var_ms: list[float],
                   stopped: str | None, best_at: dict[int, tuple[str, float]],
                   budget: Budget) -> ServedScreen:
    """The variant timed at the larger batch sizes serving forms and judged at each against
    the fastest passing variant so far there (else the baseline)."""
    curve = served_curve(state, adapter.predict, var_ms, batch_s(budget))
    base = state.base_curve or ScreenCurve()
    refs = {p.batch: best_at.get(p.batch, ("the baseline", p.ms)) for p in base.points}
    return judge_batches(curve, refs, curve.batches, stopped_at_1=stopped)


def _base_samples(state: RunState, n: int) -> list[float]:
    """The baseline's latencies on the first ``n`` timing requests: the ones timed before any
    variant loaded (the comparison uses as many as both sides have), else timed now."""
    have = state.base_samples
    if len(have) < min(n, 20):
        for req in state.requests[len(have):n]:
            t0 = time.perf_counter()
            state.baseline.predict(req)
            have.append((time.perf_counter() - t0) * 1000.0)
    return have[:n]
