"""The one report builder (report/assemble.py): advise and optimize assemble their Report through
it, so the goals, plans, assumptions and sources come from one code path, and whether a figure
is measured or an estimate is decided by the figures, not by which command built the report."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from infertune.config import Scenario
from infertune.measure.profile import Profile
from infertune.measure.stage_timers import StageReport, StageSamples
from infertune.optimize.findings import by_stage
from infertune.optimize.record import RunRecord
from infertune.report.advisor import GENERIC_CPU, advise
from infertune.report.assemble import Findings, Library, Subject, build_report
from infertune.report.knowledge import HardwareProfile, load_knowledge
from infertune.report.options import rank_options
from infertune.report.provenance import assert_all_figures_have_provenance
from infertune.report.run_report import build_run_report
from infertune.report.runtimes import RuntimeCatalogue
from infertune.report.schema import Diagnosis, Figure, Impact, Option, Rated, Report

SCENARIO = {
    "model": {"family": "transformer-encoder", "task": "embedding", "framework": "pytorch"},
    "slo": {"p95_ms": 50, "p99_ms": 80},
    "traffic": {"pattern": "bursty", "mean_rps": 10, "peak_rps": 30},
}


def run_record(scenario: Scenario, runtime: str = "torch") -> RunRecord:
    """A run that measured nothing beyond the machine (no profile, no variant, no sweep)."""
    return RunRecord(model="m", scenario=scenario, data_source="held.jsonl", quick=False,
                     task="embedding", baseline_runtime=runtime, quality_count=10, **by_stage(
                     hardware_label="test cpu (2 cores)"))


def test_advise_and_optimize_state_the_goals_plans_and_assumptions_alike() -> None:
    sc = Scenario.model_validate(SCENARIO)
    advice, run = advise(sc), build_run_report(run_record(sc))
    for section in ("measurement_plan", "guardrails"):
        assert getattr(advice, section) == getattr(run, section)
    for goal in ("latency_goal", "throughput_goal", "cost_goal"):
        assert getattr(advice.problem, goal) == getattr(run.problem, goal)
    assert advice.assumptions[-1] == run.assumptions[-1] == (
        "risk budget: medium (options above it are listed last).")
    # the run detected its machine, so it is named and not asked for; the rest are asked by both
    assert "hardware" in [m.fact for m in advice.missing_facts]
    assert [m.fact for m in run.missing_facts] == ["deployment", "current", "constraints"]
    assert "on test cpu (2 cores)" in run.problem.statement
    assert "test cpu" not in advice.problem.statement
    # the run's own assumption where it differs from advise's (it always judges on a floor)
    floor = next(m for m in run.missing_facts if m.fact == "constraints")
    assert floor.assumption == ("the task's default quality floor mean_cosine>=0.99 and no "
                                "cost ceiling")
    for report in (advice, run):
        assert_all_figures_have_provenance(report.to_dict())
        assert Report.from_dict(report.to_dict()) == report
        assert any(n.startswith("knowledge base: ") for n in report.notes)


def test_the_first_step_follows_whether_the_baseline_was_measured() -> None:
    sc = Scenario.model_validate(SCENARIO)
    subject = Subject(scenario=sc, hardware=GENERIC_CPU, hardware_known=False, runtime=None,
                      runtime_source="model.runtime")
    library = Library(knowledge=load_knowledge(), runtimes=RuntimeCatalogue.load())

    def first_step(fig: Figure) -> str:
        findings = Findings(inside_slo=False, inside_measured=False,
                            diagnosis=Diagnosis(summary="s", figures={"p50": fig}))
        return build_report("advice", "t", subject, findings, library).first_week[0].title

    measured = Figure.measured(12.0, "ms", "test cpu", 100, artifact="profile.json")
    estimate = Figure.estimate(10.0, 20.0, "ms", "a stated figure")
    assert first_step(measured) == "Days 1-2: re-measure on the production hardware"
    assert first_step(estimate) == "Days 1-2: measure where the time goes"
    # a run that never profiled its baseline measured nothing to re-measure
    run = build_run_report(run_record(sc))
    assert run.first_week[0].title == "Days 1-2: measure where the time goes"


def test_a_run_leaves_out_what_its_baselines_runtime_already_does() -> None:
    sc = Scenario.model_validate(SCENARIO)
    torch_ids = {o.id for o in build_run_report(run_record(sc, "torch")).options}
    ort = build_run_report(run_record(sc, "onnxruntime"))
    ort_ids = {o.id for o in ort.options}
    assert "torch-compile" in torch_ids and "torch-compile" not in ort_ids
    assert "ort-graph-optimisation" not in ort_ids
    assert any(n.startswith("not recommended, ONNX Runtime already does it: torch-compile")
               for n in ort.notes)
    assert any(a.startswith("runtime: ONNX Runtime (from the baseline as loaded here)")
               for a in ort.assumptions)


def profiled(run: RunRecord, slow_ms: float, slow: int = 5) -> RunRecord:
    """``run`` with a baseline profile of 200 requests whose forward pass takes 10-19 ms and,
    for the slowest ``slow``, ``slow_ms`` (only the stage report and diagnosis lines are
    read)."""
    forward = [10.0 + i % 10 for i in range(200 - slow)] + [slow_ms] * slow
    samples = StageSamples(preprocess=[1.0] * 200, forward=forward, postprocess=[0.5] * 200,
                           e2e=[f + 1.6 for f in forward])
    run.profiling.profile = cast(Profile, SimpleNamespace(stages=StageReport.from_samples(samples),
                                                diagnosis=[], cold_start=None,
                                                model={"kind": "text", "task": "embedding"}))
    return run


def test_a_profiled_baseline_sizes_the_gap_when_the_scenario_states_no_latency() -> None:
    sc = Scenario.model_validate(SCENARIO)  # no current latency stated
    fast = build_run_report(profiled(run_record(sc), slow_ms=30.0))
    statement = fast.problem.statement
    assert "has no stated current latency" not in statement
    assert " measured here (batch 1, unloaded) against a target of p95 50 ms, p99 80 ms" in (
        statement)
    p50 = fast.diagnosis.figures["baseline_p50"].value
    assert p50 is not None and f"runs at p50 {p50:.3g} ms, " in statement
    assert statement.endswith("(mean 10 and peak 30 requests/s); the baseline already meets "
                              "the SLO unloaded, so this report turns to cost.")
    assert "current" not in [m.fact for m in fast.missing_facts]  # the profile supplied it
    assert fast.first_week[0].title == "Days 1-2: re-measure on the production hardware"
    # what one timed call covers follows the model profiled (unknown without a profile)
    latency = "latency: end to end through {}, one request per call"
    assert latency.format("tokenisation, model and pooling") in fast.assumptions
    assert latency.format("preprocessing, model and postprocessing") in build_run_report(
        run_record(sc)).assumptions
    # 5 slow of 200: the p99 (400 ms) is over its 80 ms, but its interval reaches down to the
    # fast requests: not shown either way; 20 slow of 200: both intervals lie above
    straddles = build_run_report(profiled(run_record(sc), slow_ms=400.0))
    assert straddles.problem.inside_slo is None
    assert "whether the baseline meets the SLO unloaded is not shown" in (
        straddles.problem.statement)
    slow = build_run_report(profiled(run_record(sc), slow_ms=400.0, slow=20))
    assert slow.problem.inside_slo is False
    assert slow.problem.statement.endswith("; it misses its SLO.")


def test_an_slo_verdict_from_stated_figures_is_not_called_measured() -> None:
    sc = Scenario.model_validate({**SCENARIO, "current": {"p95_ms": 20, "p99_ms": 40}})
    run = build_run_report(run_record(sc))  # no profile: the verdict is the scenario's
    assert run.problem.inside_slo is True
    assert run.problem.statement.endswith("it is already inside its SLO, so the question is "
                                          "cost.")
    assert "measured here" not in run.problem.statement


def _option(oid: str, source: str = "estimate", **figs: Figure) -> Option:
    low = Rated(level="low", reason="r")
    return Option(id=oid, title=oid, impact=Impact(**figs), effort=low, risk=low, verify="v",
                  source=source)  # type: ignore[arg-type]


def test_one_ranking_measured_impacts_decide_and_cost_alone_counts_inside_the_slo() -> None:
    sc = Scenario.model_validate(SCENARIO)
    big = _option("big", p95=Figure.estimate(-60.0, -40.0, "% change", "x"))
    small = _option("small", p95=Figure.estimate(-20.0, -10.0, "% change", "x"),
                    cost=Figure.estimate(-20.0, -10.0, "% change", "x"))
    assert [o.id for o in rank_options([small, big], sc, inside=False)] == ["big", "small"]
    # a measured impact (higher is better) overrides the figures
    assert [o.id for o in rank_options([small, big], sc, False, {"small": 80.0})] == [
        "small", "big"]
    # inside the SLO only cost counts: the option without a cost figure ranks last
    assert [o.id for o in rank_options([big, small], sc, inside=True)] == ["small", "big"]


def test_the_default_recommendation_says_how_its_impact_is_known() -> None:
    sc = Scenario.model_validate(SCENARIO)
    hw = HardwareProfile(description="test cpu", caps=frozenset({"cpu"}))
    subject = Subject(scenario=sc, hardware=hw, hardware_known=True, runtime=None,
                      runtime_source="model.runtime")
    measured = _option("timed", "measured", p95=Figure.measured(-90.0, "% change", "test cpu", 50,
                                                               artifact="run.json"))
    findings = Findings(inside_slo=False, inside_measured=False,
                        diagnosis=Diagnosis(summary="s"), options=[measured])
    library = Library(knowledge=load_knowledge(), runtimes=RuntimeCatalogue.load())
    rec = build_report("run", "t", subject, findings, library).recommendation
    assert rec is not None and rec.option_id == "timed"
    assert rec.reason.startswith("highest measured impact per effort")
    advice = advise(sc).recommendation
    assert advice is not None and advice.reason.startswith("highest estimated impact per effort")
