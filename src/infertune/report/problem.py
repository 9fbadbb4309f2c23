"""The report's problem statement and its three goals (latency, throughput, cost), restated from
the scenario in one sentence each. Both advise and optimize state the problem here (via
report/assemble.py); a run adds what it measured about the baseline."""

from __future__ import annotations

from collections.abc import Mapping

from infertune.config import Scenario
from infertune.report.knowledge import HardwareProfile
from infertune.report.schema import Figure, Problem


def problem(sc: Scenario, hw: HardwareProfile, inside: bool | None, *, hardware_known: bool,
            measured_inside: bool = False, baseline: Mapping[str, Figure] | None = None,
            ) -> Problem:
    """``inside``: whether the current system meets the SLO (None: unknown). With
    ``measured_inside`` the verdict comes from a measurement on ``hw`` (the baseline, unloaded),
    and the statement says so instead of restating the scenario's own figures.
    ``hardware_known``: the machine was stated or detected, so the statement names it.
    ``baseline``: percentile -> the baseline's latency measured on ``hw``, stated (as measured)
    when the scenario gives no current latency, so the gap to the target has a size."""
    m, cur, tr = sc.model, sc.current, sc.traffic
    what = m.name or " ".join(x for x in (m.family, m.task) if x) or "a model"
    framework = f" in {m.runtime or m.framework}" if (m.runtime or m.framework) else ""
    where = f" on {hw.description}" if hardware_known else ""
    now = ", ".join(p for p in (_percentiles_text(cur.p50_ms, cur.p95_ms, cur.p99_ms),
                                _token_text(cur.ttft_p95_ms, cur.ttft_p99_ms, cur.itl_p95_ms,
                                            cur.itl_p99_ms)) if p)
    measured_now = _percentiles_text(*(_value(baseline, k) for k in ("p50", "p95", "p99")))
    if now:
        state = f" runs at {now}"
    elif measured_now:
        state = f" runs at {measured_now} measured here (batch 1, unloaded)"
    else:
        state = " has no stated current latency"
    if cur.rps:
        state += f" at {_n(cur.rps)} requests/s"
    targets = sc.slo.targets()
    goal = ", ".join([*(f"{k} {_n(v)} ms" for k, v in targets.items()),
                      *(f"{_token_name(k)} {_n(v)} ms" for k, v in sc.slo.token_targets().items())])
    against = f" against a target of {goal}" if goal else " with no stated target"
    traffic = ""
    if tr.pattern:
        rates = _rates(tr.mean_rps, tr.peak_rps)
        traffic = f", under {tr.pattern} traffic{f' ({rates})' if rates else ''}"
    verdict = ""
    if inside is True and measured_inside:
        said = not now and measured_now  # "measured here" is already in the sentence
        verdict = (f"; {'' if said else 'measured here, '}the baseline already meets the SLO "
                   "unloaded, so this report turns to cost")
    elif inside is True:
        verdict = "; it is already inside its SLO, so the question is cost"
    elif inside is False:
        verdict = "; it misses its SLO"
    elif measured_inside and targets:
        # the baseline's intervals straddle a target (or a point has none): neither verdict
        verdict = ("; measured here, whether the baseline meets the SLO unloaded is not shown "
                   "(a percentile's confidence interval straddles its target)")
    statement = f"{what[0].upper()}{what[1:]}{framework}{where}{state}{against}{traffic}{verdict}."
    return Problem(statement=statement,
                   latency_goal=_latency_goal({**targets, **{
                       _token_name(k): v for k, v in sc.slo.token_targets().items()}}),
                   throughput_goal=_throughput_goal(sc), cost_goal=_cost_goal(sc),
                   inside_slo=inside)


def _latency_goal(targets: dict[str, float]) -> str:
    if not targets:
        return "not stated; assume the team wants p95 lower than today"
    return "Keep " + " and ".join(f"{k} at or below {_n(v)} ms" for k, v in targets.items()) + "."


def _throughput_goal(sc: Scenario) -> str:
    tr = sc.traffic
    if tr.peak_rps:
        return (f"Hold the latency goal up to the peak of {_n(tr.peak_rps)} requests/s"
                f"{f' (mean {_n(tr.mean_rps)})' if tr.mean_rps else ''}.")
    if tr.mean_rps or sc.current.rps:
        return f"Hold the latency goal at {_n(tr.mean_rps or sc.current.rps or 0)} requests/s."
    return "Not stated; assume today's request rate."


def _cost_goal(sc: Scenario) -> str:
    d, c = sc.deployment, sc.constraints
    if c.cost_ceiling_usd_per_1k is not None:
        return f"At most ${_n(c.cost_ceiling_usd_per_1k)} per 1,000 requests."
    if d.cost_per_hour_usd is not None:
        return f"No ceiling stated; spend no more than today's ${_n(d.cost_per_hour_usd)}/hour."
    return "Not stated; assume no higher cost than today."


def _percentiles_text(p50: float | None, p95: float | None, p99: float | None) -> str:
    parts = [f"{k} {_n(v)} ms" for k, v in (("p50", p50), ("p95", p95), ("p99", p99)) if v]
    return ", ".join(parts)


def _value(figures: Mapping[str, Figure] | None, key: str) -> float | None:
    fig = (figures or {}).get(key)
    return fig.value if fig is not None and fig.source == "measured" else None


def _token_text(ttft95: float | None, ttft99: float | None, itl95: float | None,
                itl99: float | None) -> str:
    pairs = (("TTFT p95", ttft95), ("TTFT p99", ttft99), ("ITL p95", itl95), ("ITL p99", itl99))
    return ", ".join(f"{k} {_n(v)} ms" for k, v in pairs if v is not None)


def _token_name(key: str) -> str:
    """"ttft_p95" -> "TTFT p95"."""
    metric, _, pct = key.partition("_")
    return f"{metric.upper()} {pct}"


def _rates(mean: float | None, peak: float | None) -> str:
    parts = [f"{k} {_n(v)}" for k, v in (("mean", mean), ("peak", peak)) if v]
    return " and ".join(parts) + " requests/s" if parts else ""


def _n(x: float) -> str:
    return f"{x:g}"
