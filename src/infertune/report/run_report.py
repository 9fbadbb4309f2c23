"""A run's report: the problem, plot data, notes on what was not measured, and the assembly of
every section (run_sections.py) into one Report, written as report.json, report.md,
report.html and plots/ into the run directory.

    state = optimize(options)            # optimize/run.py: the stages
    report = write_run_report(state)     # this module: report.json and its renderings
"""

from __future__ import annotations

from typing import Any

from infertune.optimize.choice import measured_inside_slo
from infertune.optimize.serving import traffic_assumption
from infertune.optimize.state import RunState, write_json
from infertune.report.advisor import problem
from infertune.report.knowledge import HardwareProfile
from infertune.report.plan import first_week, guardrails, measurement_plan
from infertune.report.plots import render_plots
from infertune.report.render import write_report
from infertune.report.run_sections import (
    build_options,
    diagnosis,
    policy_rows,
    recommendation,
    variant_rows,
)
from infertune.report.schema import (
    Figure,
    PlotData,
    QualitySpeedPoint,
    Report,
    Series,
    StageGroup,
    StageTime,
)

CDF_PCTS = ("p50", "p90", "p95", "p99")


def plots(state: RunState) -> PlotData:
    hw = state.hardware_label
    data = PlotData()
    seen_base = False
    for c in state.candidates:
        t = c.best_timing
        if t is None:
            continue
        basis = f"{t.kind} interleaved A/B measured on {hw} with {t.samples} samples"
        if not seen_base:
            data.latency_cdf.append(Series(
                label="baseline", x_unit="ms", y_unit="fraction of requests", source="measured",
                basis=basis, points=[(t.base_p50_ms, 0.5), (t.base_p95_ms, 0.95),
                                     (t.base_p99_ms, 0.99)]))
            seen_base = True
        data.latency_cdf.append(Series(
            label=c.variant_id, x_unit="ms", y_unit="fraction of requests", source="measured",
            basis=basis, points=[(t.p50_ms, 0.5), (t.p95_ms, 0.95), (t.p99_ms, 0.99)]))
        if c.quality_value is not None:
            data.quality_vs_speed.append(QualitySpeedPoint(
                label=c.variant_id,
                speed=Figure.measured(round(t.speedup_p95, 3), "x faster at p95", hw, t.samples),
                quality=Figure.measured(round(c.quality_value, 5), "", hw,
                                        len(state.quality_inputs), what="held-out quality")))
    _mark_front(data.quality_vs_speed)
    data.latency_cdf = data.latency_cdf[:7]
    if state.profile is not None:
        st = state.profile.stages
        n = st.summaries["e2e"].count
        for label, tail in (("typical request (p40-p60)", False), ("slowest 1%", True)):
            data.stage_breakdown.append(StageGroup(label=label, stages=[
                StageTime(stage=s, time=Figure.measured(round(st.stage_ms(s, tail=tail), 3),
                                                        "ms", hw, n))
                for s in ("preprocess", "forward", "postprocess", "overhead")]))
    data.p99_vs_load = load_series(state)
    return data


def _mark_front(points: list[QualitySpeedPoint]) -> None:
    for p in points:
        p.on_front = not any(q.speed.mid > p.speed.mid and q.quality.mid >= p.quality.mid
                             for q in points if q is not p)


def load_series(state: RunState) -> list[Series]:
    """p99 against load for the leading policies (simulated at fractions of the peak)."""
    basis = f"queueing simulator fed with service times measured on {state.hardware_label}"
    return [Series(label=c.policy_id, x_unit="requests/s", y_unit="p99 ms",
                   points=list(c.points), source="estimate", basis=basis)
            for c in state.load_curves]


def notes(state: RunState) -> list[str]:
    out = [f"not measured: {s.what} ({s.reason}"
           + (f"; it would need about {s.need_s:.0f} s more)" if s.need_s else ")")
           for s in state.skipped]
    out += state.notes
    io = state.input_options
    if io is not None and io.cache is not None:
        c = io.cache
        out.append(f"response cache on {c.requests} held-out inputs: exact repeats "
                   f"{c.exact_hit_rate:.1%}, normalised-text repeats {c.normalised_hit_rate:.1%}"
                   " (counted on the data; production traffic may repeat more or less)")
    if io is not None:
        out += io.notes
    sw = state.sweep
    if sw is not None and sw.slo and not any(r.goodput_rps for r in sw.ranked):
        targets = ", ".join(f"{k} {v:g} ms" for k, v in sw.slo.items())
        out.append(f"no serving policy keeps the SLO ({targets}) at any rate on this machine "
                   "(simulated with measured "
                   "service times): the service time of long inputs alone exceeds it, so "
                   "goodput and cost per 1,000 requests at goodput are not defined here")
    for b in sw.batching if sw is not None else []:
        out.append(f"batching (simulated): {b.sentence}")
    if state.right_sizing is not None:
        rs = state.right_sizing
        cost = (f" at ${rs.cost_per_hour_usd:.2f}/hour" if rs.cost_per_hour_usd is not None
                else "")
        out.append(f"right-sizing (estimate from simulated goodput {rs.goodput_per_instance:.1f} "
                   f"req/s per instance): {rs.instances} instance(s), {rs.cores} cores for the "
                   f"peak of {rs.peak_rps:g} req/s{cost}")
    for cas in state.cascades:
        best = cas.best_within(0.99)
        if best is not None:
            out.append(f"cascade {cas.candidate} -> {cas.baseline} (estimate from measured "
                       f"per-model latencies): threshold {best.threshold:g} escalates "
                       f"{best.escalated_share:.0%}, agreement {best.agreement:.3f}, p95 "
                       f"{best.p95_ms:.1f} ms")
    return out


def build_run_report(state: RunState) -> Report:
    sc = state.options.scenario
    inside = measured_inside_slo(state)
    hwp = HardwareProfile(description=state.hardware_label or "this machine",
                          caps=frozenset({"cpu"}))
    # when the baseline meets the SLO, say so once, as measured here (the advisor's own words
    # would restate it from the scenario's figures, which may not even be given)
    prob = problem(sc, hwp, None if inside else inside)
    if inside:
        prob = prob.model_copy(update={
            "statement": prob.statement.rstrip(".") + "; measured here, the baseline already "
            "meets the SLO unloaded, so this report turns to cost.", "inside_slo": True})
    options = build_options(state, inside)
    rec, serving = recommendation(state, inside)
    floor = sc.constraints.quality_floor
    report = Report(
        kind="run", title=f"infertune optimize: {state.options.model}",
        hardware=state.hardware_label or "this machine", problem=prob,
        missing_facts=[], assumptions=_assumptions(state), diagnosis=diagnosis(state),
        options=options, first_week=first_week(options, sc.missing_facts(), inside,
                                               measured=True),
        measurement_plan=measurement_plan(sc.model.task, floor.metric if floor else None),
        guardrails=guardrails(), variants=variant_rows(state), policies=policy_rows(state),
        plots=plots(state), recommendation=rec, serving=serving, notes=notes(state))
    return report


def _assumptions(state: RunState) -> list[str]:
    sc = state.options.scenario
    out = [f"traffic: {traffic_assumption(sc.traffic)}",
           f"quality: judged on {len(state.quality_inputs)} inputs of "
           f"{state.options.data.source} against the baseline's outputs",
           "latency: end to end through tokenisation, model and pooling, one request per call"]
    if state.options.quick:
        out.append("--quick: fewer variants and shorter measurements; confirm with a full run")
    return out


def write_run_report(state: RunState) -> dict[str, Any]:
    """report.json, report.md, report.html, plots/ and run.json into the run directory; returns
    report.json's content."""
    report = Report.from_dict(build_run_report(state).to_dict(), source="optimize")
    paths = state.paths
    write_report(report, paths.root)
    for i, (title, svg) in enumerate(render_plots(report.plots)):
        name = "".join(ch if ch.isalnum() else "-" for ch in title.lower()).strip("-")
        (paths.plots / f"{i + 1:02d}-{name[:50]}.svg").write_text(svg)
    write_json(paths.run_json, {
        "stage_seconds": state.stage_seconds,
        "skipped": [s.to_dict() for s in state.skipped],
        "candidates": [c.to_dict() for c in state.candidates],
        "input_options": state.input_options.to_dict() if state.input_options else None})
    return report.to_dict()
