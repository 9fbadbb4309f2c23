"""The run report's answer to "does the recommended configuration meet the SLO here?", from the
load tests at the scenario's mean and peak rates, with the queueing simulator's prediction for
the same rate beside each measurement. The measured figures are the confirmation as served
(optimize/served/confirm.py: the configuration in its own `infertune serve` process, over HTTP,
ABBA against the other finalist) when it ran, else the in-process pre-screen, labelled as such.
When the SLO is not met, it says plainly what would, measured where it can be: the percentile
actually reached, how many instances the peak needs from the measured per-instance goodput,
and which input lengths alone take longer than the target.

Goodput at a tested rate is the rate of requests answered within the SLO while every SLO
percentile held (and at most 1% were shed); where the SLO did not hold there is no goodput at
that rate. Cost per 1,000 requests divides the scenario's cost per hour by that goodput.
"""

from __future__ import annotations

import math

from infertune.measure.tail_interval import verdict
from infertune.optimize.record import RunRecord
from infertune.optimize.served.confirm import goodput_at
from infertune.optimize.served.confirm_sizing import decisive_run
from infertune.optimize.served.policy_sweep import (
    SHED_LIMIT,
    PolicyResult,
    SimStats,
    cost_per_1k,
    validation_key,
)
from infertune.optimize.served.traffic import Validation
from infertune.report.figure_sources import CONFIRMATION, SERVING
from infertune.report.run_sections import stated_price
from infertune.report.schema import (
    Figure,
    PercentileCheck,
    Percentiles,
    SloCheck,
    SloPoint,
    TargetVerdict,
)

PCTS = ("p50", "p95", "p99")


def slo_check(run: RunRecord) -> SloCheck | None:
    sw = run.sweep.sweep
    if sw is None:
        return None
    best = sw.best
    sc = run.scenario
    ceiling = sc.constraints.cost_ceiling_usd_per_1k
    check = SloCheck(
        variant_id=sw.variant_id, policy_id=best.policy_id, targets=dict(sw.slo),
        cost_ceiling=Figure(value=ceiling, unit="USD per 1,000 requests", source="estimate",
                            basis="stated in the scenario (constraints.cost_ceiling_usd_per_1k)")
        if ceiling is not None else None)
    conf = run.confirm.confirmation
    served = conf.arm(sw.variant_id, best.policy_id) if conf is not None else None
    for label, rate, predicted in (("mean", sw.mean_rps, best.at_mean),
                                   ("peak", sw.peak_rps, best.at_peak)):
        # own process over HTTP (ABBA) when the finalists were confirmed as served; else the
        # in-process pre-screen, labelled as such
        val = served.at.get(label) if served is not None else None
        how = conf.how(served, label) if conf is not None and served and val else None
        if val is None:
            val = run.sweep.validations.get(validation_key(sw.variant_id, best.policy_id, label))
        # the confirmation's own file, else the sweep stage's (its in-process load tests)
        artifact = CONFIRMATION if how is not None else SERVING
        check.points.append(_point(run, best, label, rate, predicted, val, how, artifact))
    costs = [p.cost_per_1k.value for p in check.points
             if p.cost_per_1k is not None and p.cost_per_1k.value is not None]
    if ceiling is not None and costs:
        check.within_ceiling = min(costs) <= ceiling
    check.verdict = _verdict(check, sw.peak_rps)
    if not any(p.verdict == "meets" for p in check.points if p.label == "peak"):
        check.what_would = what_would(run, best, check)
    return check


def _point(run: RunRecord, best: PolicyResult, label: str, rate: float, predicted: SimStats,
           val: Validation | None, how: str | None, artifact: str) -> SloPoint:
    hw = run.profiling.hardware_label
    basis = f"queueing simulator fed with service times measured on {hw}"
    point = SloPoint(
        label=label, offered=Figure(value=rate, unit="requests/s", source="estimate",
                                    basis=f"the scenario's stated {label} rate"),
        predicted=Percentiles(**{k: Figure(value=round(predicted.percentile(k), 3), unit="ms",
                                           source="estimate", basis=basis)
                                 for k in PCTS if math.isfinite(predicted.percentile(k))}))
    if val is None:
        return point
    stats = val.stats
    n = max(stats.requests, 1)
    shape = f"{run.scenario.traffic.pattern or 'steady'} traffic"
    what = (f"open-loop {val.seconds:.0f} s at {label} rate ({shape}), {how}" if how else
            f"open-loop {val.seconds:.0f} s load test through serve's runtime in-process at "
            f"{label} rate ({shape}; the in-process pre-screen, not confirmed in its own "
            "process)")
    slo = best_slo(run)
    point.achieved = Figure.measured(round(val.achieved_rate, 2), "requests/s", hw, n,
                                     what=what, artifact=artifact)
    point.measured = Percentiles(**{k: Figure.measured(round(stats.percentile(k), 3), "ms", hw,
                                                       n, what=what, artifact=artifact)
                                    for k in PCTS if math.isfinite(stats.percentile(k))})
    point.shed = Figure.measured(round(stats.shed * 100, 2), "% of requests shed or failed",
                                 hw, n, what=what, artifact=artifact)
    point.checks = percentile_checks(val, slo, hw, what, artifact)
    point.verdict = point_verdict(point.checks, stats.shed)
    point.meets_slo = {"meets": True, "misses": False}.get(point.verdict)
    if point.verdict == "not shown":
        point.decisive_run = decisive_text(run, label, rate)
    if point.meets_slo:
        good = goodput_at(val, slo)  # the definition benchmarks/closed_loop.py checks
        point.goodput = Figure.measured(round(good, 2), "requests/s within the SLO", hw, n,
                                        what=what + "; every SLO percentile held, so this is a "
                                        "lower bound on the goodput at the SLO",
                                        artifact=artifact)
        cost = cost_per_1k(run.scenario.deployment.cost_per_hour_usd, good)
        price = stated_price(run)
        if cost is not None:
            # a measured rate and a stated price: the price is no measurement, so an estimate
            point.cost_per_1k = Figure(
                value=float(f"{cost:.4g}"), unit="USD per 1,000 requests", source="estimate",
                basis=f"the scenario's cost_per_hour_usd over the goodput measured at {label} "
                      f"({good:.1f} requests/s on {hw})",
                inputs=[f for f in (point.goodput, price) if f is not None])
    return point


def percentile_checks(val: Validation, slo: dict[str, float], hw: str,
                      what: str, artifact: str) -> list[PercentileCheck]:
    """Each SLO percentile's interval against its target (measure/tail_interval.py). A
    validation with no interval (a run before session 9, or nothing answered) is "not
    shown": a point estimate alone decides nothing."""
    out = []
    for key, target in slo.items():
        interval = val.intervals.get(key)
        if interval is None:
            value = val.stats.percentile(key)
            if not math.isfinite(value):
                continue
            out.append(PercentileCheck(
                key=key, target_ms=target, value=round(value, 3), samples=max(
                    val.stats.requests, 1), blocks=0, block_s=0.0, verdict="not shown",
                why=f"{key} {value:.1f} ms has no interval recorded (a point estimate decides "
                    "nothing)", basis=f"{what}, measured on {hw}", artifact=artifact))
            continue
        found, why = verdict(interval, target)
        out.append(PercentileCheck(
            key=key, target_ms=target, value=round(interval.value, 3),
            low=_r(interval.low), high=_r(interval.high), confidence=interval.confidence,
            samples=interval.samples, blocks=interval.blocks, block_s=interval.block_s,
            verdict=found, why=why,
            basis=f"{what}, measured on {hw} with {interval.samples} samples; "
                  f"{percent(interval.confidence)} interval: hull of the order-statistic and "
                  "the time-block bootstrap intervals",
            artifact=artifact))
    return out


def point_verdict(checks: list[PercentileCheck], shed: float) -> TargetVerdict:
    """"misses" when a percentile's interval lies above its target or more than 1% went
    unanswered; "meets" when every interval lies below; else "not shown"."""
    if shed > SHED_LIMIT or any(c.verdict == "misses" for c in checks):
        return "misses"
    if checks and all(c.verdict == "meets" for c in checks):
        return "meets"
    return "not shown"


def decisive_text(run: RunRecord, label: str, rate: float) -> str:
    """The run that would decide the verdict at ``label``: the confirmation's own sizing."""
    conf = run.confirm.confirmation
    if conf is not None and label in conf.decisive:
        return conf.decisive[label].text()
    return decisive_run(label, best_slo(run), run.scenario.traffic, rate).text()


def percent(confidence: float) -> str:
    """0.975 -> '97.5%', 0.95 -> '95%'."""
    return f"{round(confidence * 100, 1):g}%"


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def best_slo(run: RunRecord) -> dict[str, float]:
    return run.scenario.slo.targets()


def _verdict(check: SloCheck, peak_rps: float) -> str:
    """One sentence: meets / misses / not shown per tested rate, from the intervals."""
    targets = ", ".join(f"{k} <= {v:g} ms" for k, v in check.targets.items()) or "none stated"
    measured = [p for p in check.points if p.verdict is not None]
    config = f"{check.variant_id} with policy {check.policy_id}"
    if not measured:
        return (f"Not measured: the load tests of {config} did not run (see the notes); the "
                "simulator's predictions stand alone.")
    by = {p.label: p for p in measured}
    peak, mean = by.get("peak"), by.get("mean")
    if peak is not None and peak.verdict == "meets":
        return (f"Measured here, {config} meets the SLO ({targets}) at the peak rate of "
                f"{peak_rps:g} requests/s: {_shown(peak)}.")
    if all(p.verdict == "misses" for p in measured):
        return (f"Nothing tested here meets the SLO ({targets}): {config}, the best "
                f"configuration found, misses it at every tested rate on this machine: "
                f"{'; '.join(f'at the {p.label} rate {_shown(p)}' for p in measured)}.")
    first = mean or peak
    assert first is not None
    lead = f"Measured here, {config} " + {
        "meets": f"meets the SLO ({targets})", "misses": f"misses the SLO ({targets})",
        "not shown": f"is not shown to meet the SLO ({targets})"}[first.verdict or "not shown"]
    lead += f" at the {first.label} rate" + ("" if first.verdict == "meets"
                                            else f" ({_shown(first)})")
    rest = [f"at the {p.label} rate it " + {"misses": "misses it", "meets": "meets it"}.get(
        p.verdict or "", "is not shown to meet it") + f" ({_shown(p)})"
            for p in measured if p is not first]
    decide = [f"the run that would decide it at the {p.label} rate: {p.decisive_run}"
              for p in measured if p.verdict == "not shown" and p.decisive_run]
    return "; ".join([lead] + rest + decide) + "."


def _shown(point: SloPoint) -> str:
    """'p99 21.3 ms (95% CI 18.0-24.9) against 30 ms' for each checked percentile."""
    def one(c: PercentileCheck) -> str:
        low = f"{c.low:.1f}" if c.low is not None else "?"
        high = f"{c.high:.1f}" if c.high is not None else "unbounded"
        return (f"{c.key} {c.value:.1f} ms ({percent(c.confidence)} CI {low}-{high}) against "
                f"{c.target_ms:g} ms")
    shed = (f", {point.shed.value:g}% not answered" if point.shed is not None
            and point.shed.value else "")
    return ", ".join(one(c) for c in point.checks) + shed


def what_would(run: RunRecord, best: PolicyResult, check: SloCheck) -> list[str]:
    out: list[str] = []
    for p in check.points:
        verdicts = {c.key: c for c in p.checks}
        for key, target in check.targets.items():
            fig = getattr(p.measured, key, None)
            if fig is None or fig.value is None or fig.value <= target:
                continue
            found = verdicts.get(key)
            if found is not None and found.verdict == "misses":
                out.append(f"at the {p.label} rate the measured {key} is {fig.value:.1f} ms "
                           f"against the {target:g} ms target ({fig.value / target:.1f}x), its "
                           f"interval {_ms(found.low)}-{_ms(found.high)} ms lying above it")
            else:  # a point estimate over the target whose interval does not show a miss
                out.append(f"at the {p.label} rate the measured {key} ({fig.value:.1f} ms) is "
                           f"not shown to meet the {target:g} ms target: "
                           f"{found.why if found is not None else 'no interval recorded'}")
    out += _instances(run, best, check)
    out += _long_inputs(run, check)
    return out


def _ms(bound: float | None) -> str:
    return "unbounded" if bound is None else f"{bound:.1f}"


def _instances(run: RunRecord, best: PolicyResult, check: SloCheck) -> list[str]:
    sw = run.sweep.sweep
    assert sw is not None
    kept = [p for p in check.points if p.goodput is not None and p.goodput.value]
    if kept:
        per = max(p.goodput.value for p in kept if p.goodput and p.goodput.value)
        n = math.ceil(sw.peak_rps / per)
        return [f"about {n} instances of this machine for the peak of {sw.peak_rps:g} "
                f"requests/s: one instance measurably keeps the SLO at {per:.1f} requests/s "
                "(measured lower bound, so this is at most the number needed)"]
    if best.goodput_rps:
        n = math.ceil(sw.peak_rps / best.goodput_rps)
        return [f"estimate: about {n} instances for the peak, from the simulator's goodput of "
                f"{best.goodput_rps:.1f} requests/s per instance (not confirmed by a load test "
                "here)"]
    return ["no number of instances of this machine: even a trickle of requests misses the "
            "SLO in the simulation, so each request alone takes longer than the target; a "
            "faster variant, shorter inputs or faster hardware is needed"]


def _long_inputs(run: RunRecord, check: SloCheck) -> list[str]:
    curve = run.sweep.curve
    if curve is None or curve.seq_lens == [None] or not check.targets:
        return []
    target = min(check.targets.values())
    over = [n for n in curve.seq_lens if n is not None and curve.latency_ms(1, n) > target]
    if not over:
        return []
    first = min(over)
    return [f"inputs of {first} tokens or more take longer than {target:g} ms alone (batch 1, "
            f"forward only: the service curve measured on {run.profiling.hardware_label}); "
            "trimming or routing them elsewhere is what would keep the rest inside the SLO"]
