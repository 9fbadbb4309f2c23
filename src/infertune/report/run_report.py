"""A run's report: what the run measured (sections from run_sections.py, run_slo.py and
run_scaleout.py, plot data, notes on what was not measured) handed to the one report builder
(assemble.py, which advise uses too), then written as report.json, report.md, report.html and
plots/ into the run directory.

    optimize(options)                    # optimize/run.py: the stages, then run.json etc.
    report = write_run_report(options.out)  # this module: reads them, writes report.json
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infertune.optimize.record import RunRecord
from infertune.optimize.search.choice import measured_inside_slo
from infertune.optimize.served.traffic import traffic_assumption
from infertune.optimize.state import RunPaths, floor_for
from infertune.report.assemble import Findings, Library, RunSections, Subject, build_report
from infertune.report.figure_sources import PROFILE, quality_artifact, timing_artifact
from infertune.report.knowledge import default_dir, load_knowledge
from infertune.report.plots import render_plots
from infertune.report.render import write_report
from infertune.report.run_ceiling import ceiling_advice
from infertune.report.run_options import KNOWLEDGE_DIR
from infertune.report.run_scaleout import scale_out
from infertune.report.run_sections import (
    diagnosis,
    measured_impacts,
    measured_options,
    policy_rows,
    recommendation,
    run_hardware,
    variant_rows,
)
from infertune.report.run_slo import slo_check
from infertune.report.runtimes import RuntimeCatalogue
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


def plots(run: RunRecord) -> PlotData:
    hw = run.profiling.hardware_label
    data = PlotData()
    seen_base = False
    for c in run.screen.candidates:
        t = c.best_timing
        if t is None:
            continue
        basis = (f"{t.kind} interleaved A/B ({t.where}) measured on {hw} with "
                 f"{t.samples} samples")
        timed = timing_artifact(run, c.variant_id)
        if not seen_base:
            data.latency_cdf.append(Series(
                label="baseline", x_unit="ms", y_unit="fraction of requests", source="measured",
                basis=basis, artifact=timed, points=[(t.base_p50_ms, 0.5), (t.base_p95_ms, 0.95),
                                                     (t.base_p99_ms, 0.99)]))
            seen_base = True
        data.latency_cdf.append(Series(
            label=c.variant_id, x_unit="ms", y_unit="fraction of requests", source="measured",
            basis=basis, artifact=timed,
            points=[(t.p50_ms, 0.5), (t.p95_ms, 0.95), (t.p99_ms, 0.99)]))
        if c.quality_value is not None:
            data.quality_vs_speed.append(QualitySpeedPoint(
                label=c.variant_id,
                speed=Figure.measured(round(t.speedup_p95, 3), "x faster at p95", hw, t.samples,
                                      artifact=timed),
                quality=Figure.measured(round(c.quality_value, 5), "", hw,
                                        run.quality_count, what="held-out quality",
                                        artifact=quality_artifact(run, c.variant_id))))
    _mark_front(data.quality_vs_speed)
    data.latency_cdf = data.latency_cdf[:7]
    if run.profiling.profile is not None:
        st = run.profiling.profile.stages
        n = st.summaries["e2e"].count
        for label, tail in (("typical request (p40-p60)", False), ("slowest 1%", True)):
            data.stage_breakdown.append(StageGroup(label=label, stages=[
                StageTime(stage=s, time=Figure.measured(round(st.stage_ms(s, tail=tail), 3),
                                                        "ms", hw, n, artifact=PROFILE))
                for s in ("preprocess", "forward", "postprocess", "overhead")]))
    data.p99_vs_load = load_series(run)
    return data


def _mark_front(points: list[QualitySpeedPoint]) -> None:
    for p in points:
        p.on_front = not any(q.speed.mid > p.speed.mid and q.quality.mid >= p.quality.mid
                             for q in points if q is not p)


def load_series(run: RunRecord) -> list[Series]:
    """p99 against load for the leading policies (simulated at fractions of the peak)."""
    basis = f"queueing simulator fed with service times measured on {run.profiling.hardware_label}"
    return [Series(label=c.policy_id, x_unit="requests/s", y_unit="p99 ms",
                   points=list(c.points), source="estimate", basis=basis)
            for c in run.sweep.load_curves]


def _complete_search(run: RunRecord) -> list[str]:
    """What a complete search of this model would take here: the seconds the stages took
    (measured) plus each left-out step's need, estimated by optimize/search/costs.py from the export
    and call times the run measured (older runs: the steps' stated minimums)."""
    missing = [s.need_s for s in run.log.skipped if s.need_s]
    if not missing:
        return []
    if run.log.budget_estimate is not None:
        return [run.log.budget_estimate.sentence()]
    spent = sum(run.log.stage_seconds.values())
    return [f"a complete search of this model on this machine would need a budget of about "
            f"{spent + sum(missing):.0f} s (estimate: the {spent:.0f} s the stages took here "
            f"plus the stated need of the {len(missing)} steps left out; pass --budget with "
            "at least that)"]


def notes(run: RunRecord) -> list[str]:
    out = [f"not measured: {s.what} ({s.reason}"
           + (f"; it would need about {s.need_s:.0f} s more)" if s.need_s else ")")
           for s in run.log.skipped]
    out += _complete_search(run)
    out += run.log.notes
    io = run.inputs.input_options
    if io is not None and io.cache is not None:
        c = io.cache
        out.append(f"response cache on {c.requests} held-out inputs: exact repeats "
                   f"{c.exact_hit_rate:.1%}, normalised-text repeats {c.normalised_hit_rate:.1%}"
                   " (counted on the data; production traffic may repeat more or less)")
    if io is not None:
        out += io.notes
    sw = run.sweep.sweep
    if sw is not None and sw.slo and not any(r.goodput_rps for r in sw.ranked):
        targets = ", ".join(f"{k} {v:g} ms" for k, v in sw.slo.items())
        out.append(f"no serving policy keeps the SLO ({targets}) at any rate on this machine "
                   "(simulated with measured "
                   "service times): the service time of long inputs alone exceeds it, so "
                   "goodput and cost per 1,000 requests at goodput are not defined here")
    for b in sw.batching if sw is not None else []:
        out.append(f"batching (simulated): {b.sentence}")
    if run.sweep.right_sizing is not None:
        rs = run.sweep.right_sizing
        cost = (f" at ${rs.cost_per_hour_usd:.2f}/hour" if rs.cost_per_hour_usd is not None
                else "")
        out.append(f"right-sizing (estimate from simulated goodput {rs.goodput_per_instance:.1f} "
                   f"req/s per instance): {rs.instances} instance(s), {rs.cores} cores for the "
                   f"peak of {rs.peak_rps:g} req/s{cost}")
    for cas in run.models.cascades:
        best = cas.best_within(0.99)
        if best is not None:
            out.append(f"cascade {cas.candidate} -> {cas.baseline} (estimate from measured "
                       f"per-model latencies): threshold {best.threshold:g} escalates "
                       f"{best.escalated_share:.0%}, agreement {best.agreement:.3f}, p95 "
                       f"{best.p95_ms:.1f} ms")
    return out


def build_run_report(run: RunRecord) -> Report:
    """The run's Report, assembled by the builder advise uses (report/assemble.py) from what the
    run measured: the Findings and RunSections below are the only run-specific parts."""
    sc = run.scenario
    inside = measured_inside_slo(run)
    measured, covers = measured_options(run)  # before notes(): it may add a note to the run
    rec, serving = recommendation(run, inside)
    check = slo_check(run)
    if check is not None and run.sweep.sweep is not None:  # over the cost ceiling: what would fit
        check.what_would += ceiling_advice(check, run.sweep.sweep, sc.deployment.cost_per_hour_usd)
    subject = Subject(
        scenario=sc, hardware=run_hardware(run), hardware_known=True,
        runtime=run.baseline_runtime, runtime_source="the baseline as loaded here",
        supplied=frozenset(_measured_facts(run)), assumed={
            "traffic": traffic_assumption(sc.traffic),
            "constraints": f"the task's default quality floor "
                           f"{floor_for(sc, run.task).text()} and no cost ceiling"})
    findings = Findings(
        inside_slo=inside, inside_measured=_inside_measured(run), diagnosis=diagnosis(run),
        baseline=_baseline(run),
        options=measured, covers=covers, impacts=measured_impacts(run, inside),
        assumptions=_assumptions(run), recommendation=rec, notes=notes(run))
    library = Library(knowledge=load_knowledge([default_dir(), KNOWLEDGE_DIR]),
                      runtimes=RuntimeCatalogue.load())
    sections = RunSections(variants=variant_rows(run), policies=policy_rows(run),
                           plots=plots(run), serving=serving, slo_check=check,
                           scale_out=scale_out(run, check))
    return build_report("run", f"infertune optimize: {run.model}", subject, findings, library,
                        sections)


def _measured_facts(run: RunRecord) -> list[str]:
    """Scenario facts the run supplied by measuring, so the report does not ask for them: the
    machine (detected), the inputs (the held-out data) and, once profiled, the current
    latency (the baseline's)."""
    return ["hardware", "inputs"] + (["current"] if run.profiling.profile is not None else [])


def _baseline(run: RunRecord) -> dict[str, Figure]:
    """The baseline's end-to-end percentiles as profiled here (batch 1, unloaded)."""
    if run.profiling.profile is None:
        return {}
    e2e = run.profiling.profile.stages.summaries["e2e"]
    hw = run.profiling.hardware_label or "this machine"
    return {k: Figure.measured(float(f"{e2e.p(float(k[1:])):.3g}"), "ms", hw, e2e.count,
                               what="baseline end to end at batch 1, unloaded",
                               artifact=PROFILE)
            for k in ("p50", "p95", "p99")}


def _inside_measured(run: RunRecord) -> bool:
    """Whether measured_inside_slo judged from a measurement (the baseline's profile against
    stated targets) rather than from the scenario's stated figures."""
    return run.profiling.profile is not None and bool(run.scenario.slo.targets())


def _assumptions(run: RunRecord) -> list[str]:
    sc = run.scenario
    # a traffic fact the scenario leaves out is stated with the missing facts instead
    out = ([f"traffic: {traffic_assumption(sc.traffic)}"]
           if "traffic" not in sc.missing_facts() else [])
    out += [f"quality: judged on {run.quality_count} inputs of "
            f"{run.data_source} against the baseline's outputs",
            f"latency: end to end through {_stages_text(run)}, one request per call"]
    if run.quick:
        out.append("--quick: fewer variants and shorter measurements; confirm with a full run")
    return out


def _stages_text(run: RunRecord) -> str:
    """What one timed call covers, by the kind and task of the model the run profiled."""
    model = run.profiling.profile.model if run.profiling.profile is not None else {}
    if model.get("kind") != "text":
        return "preprocessing, model and postprocessing"
    return "tokenisation, model and " + ("pooling" if run.task == "embedding"
                                         else "postprocessing")


def write_run_report(root: Path) -> dict[str, Any]:
    """Read the run's saved record (run.json, profile.json, hardware.json) and write
    report.json, report.md, report.html and plots/ beside it; returns report.json's content."""
    run = RunRecord.load(root)
    report = Report.from_dict(build_run_report(run).to_dict(), source="optimize")
    paths = RunPaths(Path(root))
    write_report(report, paths.root)
    paths.plots.mkdir(parents=True, exist_ok=True)
    for i, (title, svg) in enumerate(render_plots(report.plots)):
        name = "".join(ch if ch.isalnum() else "-" for ch in title.lower()).strip("-")
        (paths.plots / f"{i + 1:02d}-{name[:50]}.svg").write_text(svg)
    return report.to_dict()
