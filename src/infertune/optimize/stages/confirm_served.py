"""The serving stage's last step: the finalists confirmed as served (served/confirm.py does
the measuring). Which configurations are finalists, what budget the confirmation needs (the
in-process pre-screen in sweep.py leaves it that much), and how the winner becomes the
configuration the report recommends and ``infertune serve <run>`` runs. The confirmation is
returned to sweep.py, which returns it in the stage's ConfirmArtifact."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from infertune.config import Scenario
from infertune.jsonfile import write_json
from infertune.models.variant import Manifest
from infertune.optimize.record import RunRecord
from infertune.optimize.search.budget import Budget, Progress
from infertune.optimize.search.choice import floor_margin, variant_risk
from infertune.optimize.search.ranking import LEVELS
from infertune.optimize.served.confirm import (
    VISITS_PER_ARM,
    Confirmation,
    ExtensionPlan,
    Finalist,
    Rate,
    abba_order,
    confirm,
    rate_bodies,
    request_bodies,
    served_goodput,
)
from infertune.optimize.served.confirm_sizing import (
    DRAIN_S,
    DecisiveRun,
    decisive_run,
    segment_seconds,
)
from infertune.optimize.served.policy_sweep import SweepResult, measured_key
from infertune.optimize.served.traffic import schedule_for
from infertune.optimize.state import RunState

# Confirmation as served: FINALISTS configurations, each segment CONFIRM_S per rate, ABBA.
FINALISTS = 2
CONFIRM_S = 4.0
CONFIRM_QUICK_S = 2.5
# `infertune serve` of minilm took 16-27 s to /readyz on the shared 2-core machine (imports
# of transformers dominate); both finalists start at once, so one start is budgeted
NEED_SERVE_START_S = 25.0
START_TIMEOUT_S = 90.0
NEED_AFTER_CONFIRM_S = 10.0  # left for the stages after it (input options, report)
# What a confirmation sized for a decision leaves when it grows past its minimum: the input
# options' two timings (inputs.NEED_INPUTS_S each) and the report; without it the decisive
# segments took the whole budget left and the input timings were skipped
NEED_AFTER_DECISIVE_S = 30.0


def scenario_rates(state: RunState) -> tuple[float | None, float | None]:
    sc = state.options.scenario
    mean = sc.traffic.mean_rps or sc.current.rps
    peak = sc.traffic.peak_rps or mean
    return mean, peak


def confirm_as_served(state: RunState, budget: Budget, progress: Progress,
                      sweeps: Sequence[SweepResult]) -> Confirmation | None:
    """The two leading configurations (load-tested ones first, by what they measured), each
    run by ``infertune serve`` in its own process and driven over HTTP in ABBA order at the
    mean and peak rates (served/confirm.py). Returns the confirmation (its ``winner`` None when
    no finalist's server came up), or None when it did not run (the in-process figures then
    stand, labelled as such); ``promote_winner`` makes its winner the recommendation."""
    what = "confirmation of the finalists as served (own process, over HTTP, ABBA)"
    mean, peak = scenario_rates(state)
    finals = served_finalists(state, sweeps)
    if mean is None or peak is None or not finals:
        state.skip(what, "no finalist with a variant folder to serve")
        return None
    need = confirm_need_s(state.options.quick, len(finals))
    if not budget.allows(need + NEED_AFTER_CONFIRM_S):
        state.skip(what, "time budget exhausted; the recommendation's figures are the "
                   "in-process pre-screen's (serve's runtime inside the optimizer)", need)
        return None
    sc, seed = state.options.scenario, state.options.seed
    decisive = [decisive_run(label, sc.slo.targets(), sc.traffic, rate)
                for label, rate in (("mean", mean), ("peak", peak))]
    rates, need = _rate_schedules(state, budget, decisive, len(finals))
    bodies, extend = _bodies_and_extension(state, budget, decisive, rates)
    risks = _risk_levels(state)
    progress.tick(f"starting infertune serve for {', '.join(f.key for f in finals)}")
    try:
        conf = confirm(finals, rates, bodies, workdir=state.paths.root / "confirm",
                       slo=sc.slo.targets(), cost_per_hour_usd=sc.deployment.cost_per_hour_usd,
                       risk=lambda vid: risks.get(vid, 0),
                       cost_ceiling_usd_per_1k=sc.constraints.cost_ceiling_usd_per_1k,
                       # 10x the loosest target is a miss whatever comes later: it bounds a
                       # segment's drain when a server stalls
                       request_timeout_s=max(2.0, 10 * max(sc.slo.targets().values(),
                                                           default=1000.0) / 1000),
                       start_timeout_s=min(START_TIMEOUT_S,
                                           budget.left() - need + NEED_SERVE_START_S),
                       on_segment=lambda key, label: progress.tick(f"as served: {key} at "
                                                                   f"{label}"),
                       extend=extend)
    except OSError as exc:  # e.g. the run folder not writable: the pre-screen stands
        state.skip(what, f"could not run it ({exc}); the recommendation's figures are the "
                   "in-process pre-screen's")
        return None
    conf.seed = seed  # closed_loop.py replays these schedules and bodies
    conf.decisive = {d.label: d for d in decisive}
    conf.notes += [ext.text() for ext in conf.extensions if ext.verdict_before == "not shown"]
    state.log.notes.extend(conf.notes)
    write_json(state.paths.root / "confirm" / "confirmation.json", conf.to_dict())
    if conf.winner is None:
        state.skip(what, "no finalist's server came up (see the notes); the recommendation's "
                   "figures are the in-process pre-screen's")
    else:
        state.log.notes.append(confirmation_note(conf, sc.slo.targets()))
    return conf


def promote_winner(conf: Confirmation | None, sweeps: Sequence[SweepResult]) -> str | None:
    """The confirmation's winning policy moved to the top of its sweep, so the report and
    ``serve <run>`` name it; returns its variant id, or None when nothing was confirmed."""
    if conf is None or conf.winner is None:
        return None
    for sw in sweeps:
        won = [r for r in sw.ranked if f"{sw.variant_id}/{r.policy_id}" == conf.winner]
        if won:
            sw.ranked = won + [r for r in sw.ranked if r is not won[0]]
            return sw.variant_id
    return None


def _rate_schedules(state: RunState, budget: Budget, decisive: Sequence[DecisiveRun],
                    arms: int) -> tuple[list[Rate], float]:
    """Each rate's ABBA segment schedule, its segments sized towards the decisive run the
    budget left allows, and the seconds the whole confirmation then needs."""
    sc, seed = state.options.scenario, state.options.seed
    seconds = segment_seconds(
        decisive, arms=arms, visits=VISITS_PER_ARM,
        left_s=budget.left() - NEED_AFTER_DECISIVE_S, start_s=NEED_SERVE_START_S,
        minimum_s=CONFIRM_QUICK_S if state.options.quick else CONFIRM_S, extend=True)
    rates = [(d.label, d.rate, schedule_for(sc.traffic, d.rate, seed=seed,
                                            duration_s=seconds[d.label])) for d in decisive]
    need = NEED_SERVE_START_S + arms * VISITS_PER_ARM * sum(s + 1.0 for s in seconds.values())
    return rates, need


def _bodies_and_extension(state: RunState, budget: Budget, decisive: Sequence[DecisiveRun],
                          rates: Sequence[Rate]
                          ) -> tuple[dict[str, list[dict[str, Any]]], ExtensionPlan]:
    """The request bodies of the ABBA segments, and the plan for the winner's extension,
    whose bodies continue the same seeded order past every body sent."""
    sc, seed = state.options.scenario, state.options.seed
    inputs = state.options.data.inputs
    counts = [(label, VISITS_PER_ARM * len(sched)) for label, _, sched in rates]
    bodies = rate_bodies(inputs, counts, seed=seed)
    sent = [sum(n for _, n in counts)]  # bodies of the seeded order used so far

    def more_bodies(label: str, count: int) -> list[dict[str, Any]]:
        # the same seeded order continued past every body sent: texts no finalist was sent
        start, sent[0] = sent[0], sent[0] + count
        return request_bodies(inputs, start + count, seed=seed)[start:]

    extend = ExtensionPlan(
        decisive={d.label: d for d in decisive}, targets=sc.slo.targets(),
        left_s=lambda: budget.left() - NEED_AFTER_DECISIVE_S,
        # a seed of its own, so the extension's arrivals are not the ABBA segments' again
        schedule=lambda label, rate, s: schedule_for(sc.traffic, rate, seed=seed + 1,
                                                     duration_s=s),
        bodies=more_bodies)
    return bodies, extend


def _risk_levels(state: RunState) -> dict[str, int]:
    """Each screened variant's risk level (an index into ranking.LEVELS), which breaks a tie
    between finalists."""
    run = RunRecord.from_state(state)
    return {c.variant_id: LEVELS.index(variant_risk(c, floor_margin(run, c), _manifest(
        state, c.variant_id)).level) for c in state.screen.candidates}


def confirm_need_s(quick: bool, finalists: int = FINALISTS) -> float:
    """Seconds the confirmation needs: one server start, then every ABBA segment at two
    rates (plus a second each to drain); the pre-screen leaves this much for it."""
    seconds = CONFIRM_QUICK_S if quick else CONFIRM_S
    return NEED_SERVE_START_S + len(abba_order(finalists)) * 2 * (seconds + 1.0)


def confirmation_note(conf: Confirmation, slo: dict[str, float]) -> str:
    """One line for the report: which configuration won as served, and how it was measured."""
    arms = [a for a in conf.arms if a.error is None and a.at]
    parts = [f"{a.key} (pid {a.pid}): goodput {served_goodput(a, slo):.1f} req/s, n="
             + "/".join(str(v.stats.requests) for v in a.at.values()) for a in arms]
    return (f"confirmed as served: {conf.winner} recommended; each finalist ran in its own "
            f"infertune serve process (the optimizer is pid {conf.optimizer_pid}), driven over "
            f"HTTP in ABBA order ({' -> '.join(conf.order)}), {_segment_text(conf)} per "
            f"segment; " + "; ".join(parts) + " (n at mean/peak)")


def _segment_text(conf: Confirmation) -> str:
    if not conf.seconds_at:
        return f"{conf.seconds_per_rate:g} s"
    return " and ".join(f"{s:g} s at {label}" for label, s in conf.seconds_at.items())


def confirm_reserve_s(state: RunState, budget: Budget) -> float:
    """What the pre-screen leaves for the confirmation as served: the decisive runs' reserve
    (``budget.reserved_s``) when the budget holds it now, else its minimum need when the
    budget holds that (the confirmation runs, shorter), else nothing (it will not run)."""
    need = confirm_need_s(state.options.quick) + NEED_AFTER_CONFIRM_S
    for want in (max(need, budget.reserved_s), need):
        if budget.allows(want):
            return want
    return 0.0


# The stages before the serving stage may use 80% of the default 5.5-minute budget (264 s);
# a reserve for the decisive runs is held only when they keep at least this much, so a run
# with a budget too small to decide still builds and screens as before
REST_MIN_S = 240.0


def decisive_reserve_s(scenario: Scenario, total_s: float, quick: bool) -> float:
    """Seconds to hold back from the earlier stages so the confirmation can decide the SLO
    verdict at both rates: one server start, the ABBA segments at their minimum, the winner
    topped up to each rate's decisive run (confirm_sizing), the stages after it. 0 for a
    --quick run, a scenario without rates or SLO, or a budget that would keep the stages
    before it under REST_MIN_S (the verdict is then "not shown", naming the run that decides)."""
    mean = scenario.traffic.mean_rps or scenario.current.rps
    peak = scenario.traffic.peak_rps or mean
    targets = scenario.slo.targets()
    if quick or mean is None or peak is None or not targets:
        return 0.0
    runs = [decisive_run(label, targets, scenario.traffic, rate)
            for label, rate in (("mean", mean), ("peak", peak))]
    abba = FINALISTS * VISITS_PER_ARM * len(runs) * (CONFIRM_S + DRAIN_S)
    top_up = sum(max(0.0, r.duration_s - VISITS_PER_ARM * CONFIRM_S) + DRAIN_S for r in runs)
    need = NEED_SERVE_START_S + abba + top_up + NEED_AFTER_DECISIVE_S
    return round(need, 1) if total_s - need >= REST_MIN_S else 0.0


def served_finalists(state: RunState, sweeps: Sequence[SweepResult]) -> list[Finalist]:
    """The two leading configurations with a variant folder: load-tested first (by their
    in-process figures), then the simulator's next-ranked policies."""
    configs = [(sw, r) for sw in sweeps for r in sw.ranked]
    tested = sorted((c for c in configs if c[1].validated_peak or c[1].validated_mean),
                    key=lambda c: measured_key(c[1], c[0].slo))
    out: list[Finalist] = []
    for sw, r in tested + [c for c in configs if c not in tested]:
        built = state.build.built_variant(sw.variant_id)
        if built is not None and built.path is not None and len(out) < FINALISTS:
            out.append(Finalist(sw.variant_id, r.policy_id, dict(r.policy), built.path))
    return out


def _manifest(state: RunState, variant_id: str) -> Manifest | None:
    built = state.build.built_variant(variant_id)
    return built.manifest if built is not None else None
