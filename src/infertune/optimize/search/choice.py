"""Which variant the run recommends, decided once here and read by the serving sweep (which tunes
a policy for it) and by the report (which explains it), so both always name the same variant.

Variants are ranked by measured impact per effort within the scenario's risk budget. Each is
scored on its own measured percentile against one common baseline figure (the median of the
baseline sides of the variants' A/B runs): each paired ratio is right for its pair, but on a
busy machine the baseline side varies between runs, so ranking ratios would rank the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from infertune.measure.summary import percentile_key
from infertune.models.adapter import Adapter
from infertune.models.variant import Manifest
from infertune.optimize.record import RunRecord
from infertune.optimize.search.ranking import (
    Level,
    Ranked,
    inside_slo,
    objective_key,
    rank,
    risk_budget,
)
from infertune.optimize.search.timing import Candidate, Timing, pick_best
from infertune.optimize.state import RunState, floor_for


@dataclass(frozen=True)
class Rating:
    """An effort or risk level with the reason a reader can check."""

    level: Level
    reason: str


def variant_effort(manifest: Manifest | None) -> Rating:
    """What serving the variant takes, from its manifest (None: nothing known of it)."""
    passes = [p.name for p in manifest.passes] if manifest is not None else []
    runtime = manifest.runtime if manifest is not None else ""
    precision = manifest.precision if manifest is not None else ""
    engine = "OpenVINO" if runtime == "openvino" else "ONNX Runtime"
    if "int8" in precision or any("int8" in p or "quant" in p for p in passes):
        return Rating("medium", f"a new runtime ({engine}) and a quantized model file to "
                      "version, ship and re-validate on every model update")
    if runtime in ("onnxruntime", "openvino"):
        steps = "export to ONNX" + (", convert to OpenVINO IR" if runtime == "openvino" else "")
        return Rating("medium", f"{steps} and serve with {engine}; the tokenizer and "
                      "pooling stay in Python")
    if any("compile" in p for p in passes):
        return Rating("medium", "torch.compile warm-up at start and recompiles on new shapes")
    return Rating("low", "a runtime setting on the existing PyTorch stack")


def variant_risk(cand: Candidate, margin: float | None, manifest: Manifest | None) -> Rating:
    """Risk from the quality margin over the floor and its CI, and numeric divergence."""
    agreement = manifest.agreement if manifest is not None else None
    diverge = agreement.max_abs_diff if agreement is not None else None
    precision = manifest.precision if manifest is not None else ""
    if cand.quality_verdict != "pass":
        return Rating("high", f"quality verdict {cand.quality_verdict} against the floor")
    lo = cand.quality_ci[0] if cand.quality_ci else None
    thin = margin is not None and lo is not None and margin < 0.005
    text = (f"quality passes the floor with the whole 95% CI inside it (lower end {lo:.4f})"
            if lo is not None else "quality passes the floor")
    if diverge is not None:
        text += f"; max abs output difference {diverge:.3g} on the build-time check"
    if thin or "int8" in precision:
        return Rating("medium", text + "; a quantized model can drift on inputs unlike the "
                      "held-out set, so keep watching quality after rollout")
    return Rating("low", text)


def floor_margin(run: RunRecord, cand: Candidate) -> float | None:
    floor = floor_for(run.scenario, run.task)
    if floor.kind != "bound" or not cand.quality_value:
        return None
    return cand.quality_value - floor.threshold


def measured_inside_slo(run: RunRecord) -> bool | None:
    """Measured: the baseline's unloaded batch-1 percentiles against every SLO target, from
    their confidence intervals (meets / misses / not shown): True when every interval lies at
    or below its target, False when one lies above, None (not shown) otherwise, a point
    estimate without an interval included. The scenario's stated figures when nothing was
    measured."""
    targets = run.scenario.slo.targets()
    if not targets or run.profiling.profile is None:
        return inside_slo(run.scenario)
    e2e = run.profiling.profile.stages.summaries["e2e"]
    found = [e2e.percentiles[percentile_key(float(k[1:]))] for k in targets]
    if any(f.low is not None and f.low > v for f, v in zip(found, targets.values(), strict=True)):
        return False
    if all(f.high is not None and f.high <= v
           for f, v in zip(found, targets.values(), strict=True)):
        return True
    return None


def common_baseline_ms(candidates: Sequence[Candidate], key: str) -> float | None:
    bases = [_base(c.best_timing, key) for c in candidates if c.best_timing is not None]
    return float(np.median(bases)) if bases else None


def variant_impact(cand: Candidate, key: str, common: float | None) -> float:
    """Percent faster than the common baseline figure at ``key`` (higher is better)."""
    t = cand.best_timing
    if t is None or not common:
        return 0.0
    return (1.0 - _own(t, key) / common) * 100.0


def _own(t: Timing, key: str) -> float:
    return float(getattr(t, f"{key}_ms"))


def _base(t: Timing | None, key: str) -> float:
    assert t is not None
    return float(getattr(t, f"base_{key}_ms"))


def ranked_variants(run: RunRecord, inside: bool | None) -> list[Ranked[Candidate]]:
    """The variants still in the search (timed, not dropped), best first."""
    alive = [c for c in run.screen.candidates if c.best_timing is not None and not c.dropped]
    key = objective_key(inside, run.scenario.slo.targets())
    common = common_baseline_ms(alive, key)

    def manifest(c: Candidate) -> Manifest | None:
        built = run.build.built_variant(c.variant_id)
        return built.manifest if built is not None else None

    return rank(alive, impact=lambda c: variant_impact(c, key, common),
                effort=lambda c: variant_effort(manifest(c)).level,
                risk=lambda c: variant_risk(c, floor_margin(run, c), manifest(c)).level,
                risk_budget=risk_budget(run.scenario))


def recommended_candidate(run: RunRecord, inside: bool | None) -> Candidate | None:
    """When the joint search load-tested more than one finalist, the variant of the
    configuration that measured best through serve's runtime. Otherwise the highest-ranked
    variant that passes the floor, is within the risk budget and is measurably faster than the
    baseline; else the fastest such survivor; None when no variant is both passing and
    measurably faster."""
    winner = measured_winner(run)
    if winner is not None:
        return winner
    for r in ranked_variants(run, inside):
        t = r.item.best_timing
        if (r.item.quality_verdict == "pass" and r.within_risk_budget and t is not None
                and t.measurably_faster):
            return r.item
    return pick_best(run.screen.candidates)


def measured_winner(run: RunRecord) -> Candidate | None:
    """The finalist variant the serving measurements chose, when there was a choice: the
    confirmation as served (each finalist in its own serve process) when it ran, else the
    in-process load tests of more than one finalist."""
    conf = run.confirm.confirmation
    if conf is not None and conf.winner is not None and run.sweep.sweep is not None:
        chosen = run.sweep.sweep.variant_id
        return next((c for c in run.screen.candidates if c.variant_id == chosen), None)
    if len(run.sweep.finalist_sweeps) < 2 or run.sweep.sweep is None:
        return None
    best = run.sweep.sweep.best
    if best.validated_peak is None and best.validated_mean is None:
        return None  # nothing was load-tested: the batch-1 ranking stands
    chosen = run.sweep.sweep.variant_id
    return next((c for c in run.screen.candidates if c.variant_id == chosen), None)


def best_variant_id(state: RunState) -> str:
    """The variant the report will recommend (the baseline's id when none)."""
    run = RunRecord.from_state(state)
    best = recommended_candidate(run, measured_inside_slo(run))
    if best is not None:
        return best.variant_id
    return state.build.baseline_variant_id or "baseline"


def adapter_of(state: RunState, variant_id: str) -> Adapter:
    """A variant's adapter (loading it releases the variant loaded before), or the baseline's
    for an id that names no screened variant."""
    return state.adapters[variant_id] if variant_id in state.adapters else state.baseline


def best_adapter(state: RunState) -> tuple[str, Adapter]:
    """The variant the report will recommend, and its adapter (the baseline when none)."""
    variant_id = best_variant_id(state)
    return variant_id, adapter_of(state, variant_id)
