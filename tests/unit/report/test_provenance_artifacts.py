"""Provenance that cannot be wrong (issue 28, item 3): a figure labelled measured carries its
sample count and the artifact that measured it, a value derived from an estimate is an estimate,
and the check follows derivations, not only labels. The run report names, for every measured
figure, a file the optimize stages really write into the run folder."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

import infertune.optimize
from infertune.config import Scenario, ServePolicy
from infertune.jsonfile import write_json
from infertune.measure.profile import Profile
from infertune.measure.stage_timers import StageReport, StageSamples
from infertune.measure.tail_interval import TailInterval
from infertune.models.variant import Manifest, PassRecord
from infertune.optimize.findings import BuiltVariant, by_stage
from infertune.optimize.record import RunRecord
from infertune.optimize.search.timing import Candidate, Timing
from infertune.optimize.served.input_options import InputOptions, TimedOption
from infertune.optimize.served.policy_sweep import SimStats, SweepGrid, sweep, validation_key
from infertune.optimize.served.traffic import Validation
from infertune.optimize.state import RunPaths
from infertune.report.figure_sources import (
    CONFIRMATION,
    LATENCY_FILE,
    QUALITY_FILE,
    is_run_artifact,
)
from infertune.report.provenance import artifact_problem, provenance_problems
from infertune.report.run_report import build_run_report
from infertune.report.schema import IN_PROCESS_ARTIFACT, Figure, Series

HW = "test cpu (2 cores)"
OPTIMIZE = Path(infertune.optimize.__file__).parent


def measured_nodes(node: Any, path: str = "$") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every Figure, Series or percentile check labelled measured in a report dict."""
    if isinstance(node, dict):
        if node.get("source") == "measured" and "basis" in node:
            yield path, node
        for key, child in node.items():
            yield from measured_nodes(child, f"{path}.{key}")
    elif isinstance(node, list):
        for i, child in enumerate(node):
            yield from measured_nodes(child, f"{path}[{i}]")


# -- the check itself ------------------------------------------------------------------------

def test_a_measured_figure_or_series_without_its_artifact_is_a_problem() -> None:
    bare = Figure(value=3.0, unit="ms", source="measured", samples=40, basis="timed here")
    assert provenance_problems({"p50": bare.to_dict()}) == [
        "$.p50: labelled measured without the artifact that measured it"]
    named = bare.model_copy(update={"artifact": "profile.json"})
    assert provenance_problems({"p50": named.to_dict()}) == []
    empty = bare.model_copy(update={"artifact": "  "})
    assert len(provenance_problems({"p50": empty.to_dict()})) == 1
    cdf = Series(label="baseline", x_unit="ms", y_unit="fraction", points=[(1.0, 0.5)],
                 source="measured", basis="timed here")
    assert provenance_problems({"cdf": cdf.to_dict()}) == [
        "$.cdf: labelled measured without the artifact that measured it"]
    # an estimate names no artifact: nothing measured it
    guess = Figure.estimate(1.0, 2.0, "ms", "a stated figure")
    assert provenance_problems({"guess": guess.to_dict()}) == []


@pytest.mark.parametrize("artifact", ["/tmp/run/profile.json", "../other/run.json",
                                      "variants//latency.json", "./run.json",
                                      "C:\\runs\\run.json", "https://host/run.json",
                                      "the profile", "variants/int8/"])
def test_an_artifact_that_is_no_relative_path_is_a_problem(artifact: str) -> None:
    fig = Figure.measured(3.0, "ms", HW, 40, artifact=artifact)
    problems = provenance_problems({"p50": fig.to_dict()})
    assert len(problems) == 1 and "is not a path relative to the run folder" in problems[0]


def test_relative_paths_and_the_advise_measure_label_are_artifacts() -> None:
    for ok in ("profile.json", "variants/ort_int8/latency.json", CONFIRMATION,
               IN_PROCESS_ARTIFACT):
        assert artifact_problem(ok) is None, ok
    assert artifact_problem(None) == "labelled measured without the artifact that measured it"


def test_a_measured_figure_derived_from_an_estimate_is_flagged_however_deep() -> None:
    rate = Figure.measured(20.0, "requests/s", HW, 900, artifact="serving.json")
    price = Figure(value=0.2, unit="USD per hour", source="estimate", basis="stated")
    cost = Figure.measured(0.0028, "USD per 1,000 requests", HW, 900, artifact="serving.json",
                           inputs=[rate, price])
    assert provenance_problems({"cost": cost.to_dict()}) == [
        "$.cost: labelled measured but derived from the estimate at $.cost.inputs[1]; label it "
        "an estimate"]
    ratio = Figure.measured(-40.0, "% change", HW, 900, artifact="run.json", inputs=[cost])
    problems = provenance_problems({"ratio": ratio.to_dict()})
    # the ratio derives from the price through the cost; the cost is flagged on its own too
    assert ("$.ratio: labelled measured but derived from the estimate at "
            "$.ratio.inputs[0].inputs[1]; label it an estimate") in problems
    assert len(problems) == 2
    honest = cost.model_copy(update={"source": "estimate"})
    assert provenance_problems({"cost": honest.to_dict()}) == []


# -- a whole run report ----------------------------------------------------------------------

def timing(vid: str, kind: str, p95: float, base_p95: float) -> Timing:
    return Timing(vid, kind, 400, p95 / 3, p95, p95 * 1.3, base_p95 / 3, base_p95,
                  base_p95 * 1.3, p95 / base_p95, (0.1, 0.2), p95 / base_p95, (0.1, 0.2),
                  "B is faster", 10.0)


def fake_sim(policy: ServePolicy, rate: float) -> SimStats:
    service = 4.0 + policy.max_batch_size
    return SimStats(rate, service, service * 1.5, service * 2.0, shed=0.0, utilisation=0.5)


def intervals(stats: SimStats) -> dict[str, TailInterval]:
    return {k: TailInterval(int(k[1:]) / 100, v, 0.9 * v, 1.1 * v, stats.requests, 60, 1.0)
            for k in ("p50", "p95", "p99") if (v := stats.percentile(k)) is not None}


def stage_profile() -> Profile:
    """A profile stand-in: the stage report and what the report reads beside it."""
    forward = [10.0 + i % 10 for i in range(200)]
    samples = StageSamples(preprocess=[1.0] * 200, forward=forward, postprocess=[0.5] * 200,
                           e2e=[f + 1.6 for f in forward])
    return cast(Profile, SimpleNamespace(stages=StageReport.from_samples(samples),
                                         diagnosis=[], cold_start=None,
                                         model={"kind": "text", "task": "embedding"}))


def full_run(root: Path) -> RunRecord:
    """A run that measured every kind of figure a run report shows: the baseline profile, a
    built variant's A/B and quality, a --candidate model, the sweep's load tests at mean and
    peak, and input trimming."""
    scenario = Scenario.model_validate({
        "slo": {"p95_ms": 50, "p99_ms": 80},
        "traffic": {"pattern": "steady", "mean_rps": 10, "peak_rps": 30},
        "deployment": {"cost_per_hour_usd": 0.2}})
    slo = scenario.slo.targets()
    result = sweep(fake_sim, variant_id="int8", slo=slo, mean_rps=10, peak_rps=30,
                   grid=SweepGrid((1, 4), (0.0,), (1,), (64,)),
                   service_ms=lambda b: 4.0 + b, cost_per_hour_usd=0.2, timeout_ms=80.0)
    best = result.best
    best.validated_mean = SimStats(10, 6.0, 9.0, 12.0, shed=0.0, requests=3000)
    best.validated_peak = SimStats(30, 7.0, 12.0, 20.0, shed=0.0, requests=3000)
    trimmed = TimedOption("trimming", "max length 128", "max length 64", 10.0, 8.0, 14.0, 10.0,
                          10.0 / 14.0, 0.6, 0.8, "B is faster", 200, "64 tokens")
    return RunRecord(
        model="m", scenario=scenario, data_source="held.jsonl", quick=False, task="embedding",
        baseline_runtime="torch", quality_count=64, **by_stage(hardware_label=HW,
        baseline_variant_id="torch_fp32", profile=stage_profile(),
        # the folder the pass wrote: its name, not the variant id, is where its files are
        built=[BuiltVariant("int8", root / "variants" / "ort_int8", "ONNX Runtime int8",
                            manifest=Manifest("int8", "onnxruntime", "int8", "text",
                                              "embedding", "model.onnx",
                                              passes=[PassRecord("quant")]))],
        candidates=[Candidate("int8", "int8", "pass", 0.995, (0.994, 0.996),
                              quick=timing("int8", "quick", 10.0, 30.0),
                              proper=timing("int8", "proper", 9.0, 30.0))],
        candidate_models=[Candidate("candidate-small", "candidate model small", "pass", 0.991,
                                    (0.99, 0.993), quick=timing("candidate-small", "quick",
                                                                20.0, 30.0))],
        sweep=result,
        validations={validation_key("int8", best.policy_id, label): Validation(
            stats, rate, 0.4, 60.0, [], intervals=intervals(stats))
            for label, stats, rate in (("mean", best.validated_mean, 10.0),
                                       ("peak", best.validated_peak, 29.5))},
        input_options=InputOptions(None, 64, 0.01, trimmed, None, [])))


def save_as_optimize_does(run: RunRecord, root: Path) -> None:
    """The files the stages write, at the paths they write them (optimize/stages/,
    record.py; RunPaths): only their names matter here."""
    paths = RunPaths(root)
    profile, run.profiling.profile = run.profiling.profile, None  # a stand-in: no to_dict
    run.save(paths)
    run.profiling.profile = profile
    write_json(paths.profile, {"stand-in": "the baseline profile"})
    write_json(paths.serving, {"validations": {k: v.to_dict()
                                               for k, v in run.sweep.validations.items()}})
    write_json(paths.extras, {"candidates": [c.to_dict() for c in run.models.candidate_models]})
    for b in run.build.built:
        assert b.path is not None
        cand = next(c for c in run.screen.candidates if c.variant_id == b.variant_id)
        write_json(b.path / LATENCY_FILE, {"quick": cand.quick.to_dict() if cand.quick else None,
                                           "proper": cand.proper.to_dict()
                                           if cand.proper else None})
        write_json(b.path / QUALITY_FILE, {"verdict": cand.quality_verdict})


def test_every_measured_figure_of_a_run_report_names_a_file_the_run_wrote(
        tmp_path: Path) -> None:
    run = full_run(tmp_path)
    save_as_optimize_does(run, tmp_path)
    data = json.loads(json.dumps(build_run_report(run).to_dict()))
    assert provenance_problems(data) == []
    found = list(measured_nodes(data))
    named = {node["artifact"] for _, node in found}
    # every kind of measured figure is in this report, each from its own file
    assert named == {"profile.json", "serving.json", "extras.json", "run.json",
                     "variants/ort_int8/latency.json", "variants/ort_int8/quality.json"}
    for path, node in found:
        assert is_run_artifact(node["artifact"]), path
        assert (tmp_path / node["artifact"]).is_file(), (path, node["artifact"])
    # the SLO check's measured figures come from the sweep stage's load tests
    check = data["slo_check"]
    for point in check["points"]:
        assert point["measured"]["p99"]["artifact"] == "serving.json"
        assert all(c["artifact"] == "serving.json" for c in point["checks"])
    # taking one artifact away is one problem, named where it is
    where, node = next((p, n) for p, n in found if p.startswith("$.variants"))
    del node["artifact"]
    assert provenance_problems(data) == [
        f"{where}: labelled measured without the artifact that measured it"]


def test_derived_figures_of_a_run_report_carry_their_inputs(tmp_path: Path) -> None:
    data = build_run_report(full_run(tmp_path)).to_dict()
    peak = next(p for p in data["slo_check"]["points"] if p["label"] == "peak")
    cost = peak["cost_per_1k"]
    # a measured goodput and the scenario's stated price: an estimate that says so
    assert cost["source"] == "estimate"
    assert [f["source"] for f in cost["inputs"]] == ["measured", "estimate"]
    assert cost["inputs"][0] == peak["goodput"]
    # labelled measured it would be caught through its inputs, not by its label
    cost["source"] = "measured"
    cost["samples"] = peak["goodput"]["samples"]
    cost["artifact"] = "serving.json"
    assert provenance_problems(data) == [
        "$.slo_check.points[1].cost_per_1k: labelled measured but derived from the estimate at "
        "$.slo_check.points[1].cost_per_1k.inputs[1]; label it an estimate"]
    # a variant's change is derived from the two measured percentiles of its A/B
    option = next(o for o in data["options"] if o["id"] == "variant-int8")
    p95 = option["impact"]["p95"]
    assert [f["value"] for f in p95["inputs"]] == [9.0, 30.0]
    assert option["impact"]["cost"]["inputs"] == [option["impact"]["p50"]]
    # the simulator's cost per 1,000 derives from its goodput and the stated price
    row = data["policies"][0]
    assert row["cost_per_1k"]["inputs"][0] == row["goodput"]


def test_the_optimize_writers_still_use_the_names_the_report_gives() -> None:
    """The names not built from RunPaths are spelled where optimize writes them."""
    screen = (OPTIMIZE / "stages" / "screen.py").read_text()
    assert f'/ "{LATENCY_FILE}"' in screen and f'/ "{QUALITY_FILE}"' in screen
    assert f'/ "{LATENCY_FILE}"' in (OPTIMIZE / "stages" / "survivors.py").read_text()
    folder, name = CONFIRMATION.split("/")
    assert f'"{folder}" / "{name}"' in (OPTIMIZE / "stages" / "confirm_served.py").read_text()
