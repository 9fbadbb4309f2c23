"""The run's typed record (run.json): it round-trips, the report is built from the saved files,
and a damaged or foreign run directory is one clear error."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from infertune.config import Scenario, ServePolicy
from infertune.errors import ConfigError
from infertune.measure.tail_interval import TailInterval
from infertune.models.variant import Manifest, PassRecord
from infertune.optimize.findings import (
    BuildArtifact,
    BuiltVariant,
    LoadCurve,
    RunFindings,
    by_stage,
)
from infertune.optimize.record import RunRecord
from infertune.optimize.search.choice import recommended_candidate, variant_effort
from infertune.optimize.search.timing import Candidate, Skipped, Timing
from infertune.optimize.served.policy_sweep import (
    SimStats,
    SweepGrid,
    SweepResult,
    policy_id,
    sweep,
    validation_key,
)
from infertune.optimize.served.traffic import Validation
from infertune.optimize.stages.sweep import serve_deadline_ms
from infertune.optimize.state import RunPaths, RunState
from infertune.report.run_report import build_run_report, write_run_report


def timing(vid: str, p95: float, base_p95: float) -> Timing:
    return Timing(vid, "proper", 400, p95 / 3, p95, p95 * 1.3, base_p95 / 3, base_p95,
                  base_p95 * 1.3, p95 / base_p95, (0.1, 0.2), p95 / base_p95, (0.1, 0.2),
                  "B is faster", 10.0)


def fake_sim(policy: ServePolicy, rate: float) -> SimStats:
    service = 4.0 + policy.max_batch_size
    return SimStats(rate, service, service * 1.5, service * 2.0, shed=0.0, utilisation=0.5)


def int8_manifest() -> Manifest:
    return Manifest("int8", "onnxruntime", "int8", "text", "embedding", "model.onnx",
                    passes=[PassRecord("quant")])


def record(tmp_path: Path) -> RunRecord:
    scenario = Scenario.model_validate({
        "slo": {"p95_ms": 50, "p99_ms": 80},
        "traffic": {"pattern": "steady", "mean_rps": 10, "peak_rps": 30},
        "deployment": {"cost_per_hour_usd": 0.2}})
    slo = scenario.slo.targets()
    result = sweep(fake_sim, variant_id="int8", slo=slo, mean_rps=10, peak_rps=30,
                   grid=SweepGrid((1, 4), (0.0,), (1,), (64,)),
                   service_ms=lambda b: 4.0 + b, cost_per_hour_usd=0.2,
                   timeout_ms=serve_deadline_ms(slo))
    best = result.best
    best.validated_peak = SimStats(30, 7.0, 12.0, 20.0, shed=0.0, mean_batch=1.5, requests=180)
    folder = tmp_path / "variants" / "int8"
    return RunRecord(
        model="m", scenario=scenario, data_source="held.jsonl", quick=True, task="embedding",
        baseline_runtime="torch", quality_count=64, **by_stage(hardware_label="test cpu (2 cores)",
        baseline_variant_id="torch_fp32",
        built=[BuiltVariant("int8", folder, "ONNX Runtime int8", manifest=int8_manifest())],
        candidates=[Candidate("int8", "int8", "pass", 0.995, (0.994, 0.996),
                              proper=timing("int8", 9.0, 30.0))],
        sweep=result,
        validations={validation_key("int8", best.policy_id, "peak"): Validation(
            best.validated_peak, 29.5, 0.4, 6.0, [], intervals={
                k: TailInterval(q, v, 0.9 * v, 1.1 * v, 180, 12, 1.0)
                for k, q, v in (("p50", 0.5, 7.0), ("p95", 0.95, 12.0), ("p99", 0.99, 20.0))})},
        load_curves=[LoadCurve(best.policy_id, [(7.5, 9.0), (30.0, 12.0)])],
        skipped=[Skipped("variant torch_bf16", "not built: --quick", 30.0)],
        notes=["a note"], stage_seconds={"setup": 0.1}))


def test_the_record_round_trips_through_run_json(tmp_path: Path) -> None:
    run = record(tmp_path)
    data = json.loads(json.dumps(run.to_dict()))
    again = RunRecord.from_dict(data)
    assert again.to_dict() == run.to_dict()
    assert again.build.built[0].path == tmp_path / "variants" / "int8"
    assert again.sweep.sweep is not None and again.sweep.sweep.best.policy["timeout_ms"] == 800.0


def test_the_report_is_built_from_the_saved_files(tmp_path: Path) -> None:
    run = record(tmp_path)
    run.save(RunPaths(tmp_path))
    report = write_run_report(tmp_path)
    assert report == build_run_report(RunRecord.load(tmp_path)).to_dict()
    assert (tmp_path / "report.json").is_file() and (tmp_path / "report.md").is_file()
    assert report["recommendation"]["variant_id"] == "int8"
    serving = report["serving"]
    assert serving["policy_id"] == policy_id(ServePolicy(**serving["policy"]))
    # the deadline serve applies to a run is stated in the report's policy
    assert serving["policy"]["timeout_ms"] == 800.0
    # one skipped step needing 30 s on top of 0.1 s of stages: the budget a full search needs
    assert any("would need a budget of about 30 s" in n for n in report["notes"])


def test_the_slo_check_shows_measured_beside_predicted_and_what_would(tmp_path: Path) -> None:
    run = record(tmp_path)
    check = build_run_report(run).slo_check
    assert check is not None and check.targets == {"p95": 50.0, "p99": 80.0}
    peak = next(p for p in check.points if p.label == "peak")
    # measured p99 20 ms (load test) beside the simulator's 2 x (4 + batch) ms
    assert peak.measured.p99.value == 20.0 and peak.measured.p99.source == "measured"
    assert peak.predicted.p99.source == "estimate" and peak.predicted.p99.value is not None
    assert peak.meets_slo is True and peak.goodput.value == 29.5  # achieved 29.5 req/s, 0 shed
    # cost per 1,000 at the measured goodput: 0.2 USD/h / (29.5 req/s * 3600 s) * 1000
    assert peak.cost_per_1k.value == pytest.approx(0.2 / (29.5 * 3.6), rel=1e-3)
    assert "meets the SLO" in check.verdict and check.what_would == []
    mean = next(p for p in check.points if p.label == "mean")
    assert mean.meets_slo is None and mean.goodput is None  # not load-tested: no figure

    # the same configuration missing the SLO at peak: the report says so and what would
    assert run.sweep.sweep is not None
    run.sweep.sweep.best.validated_peak = SimStats(30, 60.0, 120.0, 200.0, shed=0.0, requests=180)
    pid = run.sweep.sweep.best.policy_id
    mean_stats = SimStats(10, 6.0, 9.0, 12.0, shed=0.0, requests=600)
    run.sweep.validations = {validation_key("int8", pid, "peak"): Validation(
        run.sweep.sweep.best.validated_peak, 29.0, 0.4, 6.0, [], intervals=tight(
            run.sweep.sweep.best.validated_peak)),
        validation_key("int8", pid, "mean"): Validation(
        mean_stats, 10.0, 0.3, 6.0, [], intervals=tight(mean_stats))}
    check = build_run_report(run).slo_check
    assert check is not None
    assert check.verdict.startswith(f"Measured here, int8 with policy {pid} meets the "
                                    "SLO (p95 <= 50 ms, p99 <= 80 ms) at the mean rate; at the "
                                    "peak rate it misses it (p95 120.0 ms (95% CI 108.0-132.0) "
                                    "against 50 ms, p99 200.0 ms (95% CI 180.0-220.0) against "
                                    "80 ms).")
    assert any("measured p99 is 200.0 ms against the 80 ms target (2.5x)" in w
               for w in check.what_would)
    assert any(w.startswith("about 3 instances") for w in check.what_would)  # 30 / 10 req/s


def tight(stats: SimStats) -> dict[str, TailInterval]:
    """Intervals 10% either side of each percentile over 12 one-second blocks: decisive."""
    return {k: TailInterval(int(k[1:]) / 100, stats.percentile(k), 0.9 * stats.percentile(k),
                            1.1 * stats.percentile(k), stats.requests, 12, 1.0)
            for k in ("p50", "p95", "p99")}


def test_the_joint_search_recommends_the_configuration_that_measured_best(tmp_path: Path) -> None:
    run = record(tmp_path)
    assert recommended_candidate(run, inside=False).variant_id == "int8"  # batch-1 ranking
    # a second finalist, slower at batch 1, whose best policy measured better under load
    run.screen.candidates.append(Candidate("fused", "fused", "pass", 0.999, (0.998, 1.0),
                                    proper=timing("fused", 15.0, 30.0)))
    assert run.sweep.sweep is not None
    fused = SweepResult.from_dict(run.sweep.sweep.to_dict())
    fused.variant_id = "fused"
    run.sweep.finalist_sweeps = [run.sweep.sweep, fused]
    assert recommended_candidate(run, inside=False).variant_id == "int8"  # sweep says int8
    run.sweep.sweep = fused
    assert recommended_candidate(run, inside=False).variant_id == "fused"
    report = build_run_report(run)
    assert report.recommendation is not None and report.recommendation.variant_id == "fused"
    assert "measured best" in report.recommendation.reason
    assert report.serving is not None and report.serving.variant_id == "fused"
    assert {p.variant_id for p in report.policies} == {"int8", "fused"}
    assert report.policies[0].variant_id == "fused"  # the winner's policies first


def test_a_folder_that_is_not_a_run_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not an optimize run directory"):
        RunRecord.load(tmp_path)
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        RunRecord.load(tmp_path)
    (tmp_path / "run.json").write_text(json.dumps({"schema": "something/v0"}))
    with pytest.raises(ConfigError, match="re-run infertune optimize"):
        RunRecord.load(tmp_path)


def test_a_v1_run_json_loads_with_each_finding_under_its_stage(tmp_path: Path) -> None:
    # captured from RunRecord.to_dict as it was written by hand (schema infertune.run/v1, every
    # finding flat at the top level), on this module's record() with the variant path relative;
    # its variant's manifest is the whole dict Manifest.to_dict writes, as a run's builder wrote
    # it (the record's hand-made three-key dict no longer fits the typed Manifest)
    old = json.loads((Path(__file__).parent / "run_json_hand_written.json").read_text())
    assert old["schema"] == "infertune.run/v1"
    (tmp_path / "run.json").write_text(json.dumps(old))
    loaded = RunRecord.load(tmp_path).to_dict()
    assert loaded["schema"] == "infertune.run/v2"
    stage_of = {f.name: stage.name for stage in dataclasses.fields(RunFindings)
                for f in dataclasses.fields(getattr(RunFindings(), stage.name))}
    new = record(tmp_path).to_dict()  # the same record written today
    new["build"]["built"] = [{**b, "path": f"variants/{b['variant_id']}"}
                             for b in new["build"]["built"]]
    # since the v1 file was captured, the sweep states deadline-sized queue bounds (policy ids
    # end -q320 where the file has -q64): today's record is compared on every other finding
    resized = {"sweep", "validations", "load_curves", "finalist_sweeps"}
    for key, value in old.items():
        if key == "schema":
            continue
        # the run's own facts stay at the top level, each finding moves under its stage
        for v2 in (loaded,) if key in resized else (loaded, new):
            assert (v2[stage_of[key]][key] if key in stage_of else v2[key]) == value, key


def test_a_variant_manifest_written_as_a_dict_reads_as_the_typed_manifest() -> None:
    # a run.json from before BuiltVariant.manifest was typed: a built variant's manifest is
    # Manifest.to_dict's, and a variant that did not build has {}
    built = BuildArtifact.from_dict({"built": [
        {"variant_id": "int8", "path": "variants/int8", "title": "int8",
         "manifest": int8_manifest().to_dict()},
        {"variant_id": "bf16", "path": None, "title": "bf16", "skipped": "no bf16",
         "manifest": {}}]}).built
    assert built[0].manifest == int8_manifest()
    assert built[1].manifest is None
    assert variant_effort(built[0].manifest).level == "medium"  # an int8 model to ship
    assert variant_effort(built[1].manifest).level == "low"


@pytest.mark.parametrize(("schema", "says"), [
    ("infertune.run/v3", "'infertune.run/v3' is newer than this infertune reads"),
    ("infertune.report/v1", "'infertune.report/v1' is not 'infertune.run/v2'"),
    (None, "None is not 'infertune.run/v2'")])
def test_a_run_json_of_another_schema_or_version_is_refused_in_one_line(
        tmp_path: Path, schema: str | None, says: str) -> None:
    (tmp_path / "run.json").write_text(json.dumps({"schema": schema, "model": "m"}))
    with pytest.raises(ConfigError, match=re.escape(says)) as exc:
        RunRecord.load(tmp_path)
    assert "\n" not in str(exc.value)


def test_every_finding_of_the_live_run_reaches_the_saved_record(tmp_path: Path) -> None:
    # a measured fact added to a stage's artifact (findings.py) reaches run.json with
    # no other edit: the live state and the record hold the same artifacts, which Serial writes
    state = RunState(options=SimpleNamespace(
        model="m", scenario=Scenario(), data=SimpleNamespace(source="held.jsonl"), quick=True),
        paths=RunPaths(tmp_path), baseline=SimpleNamespace(
            info=SimpleNamespace(task="embedding", runtime="torch")))
    skipped = set()
    for i, stage in enumerate(dataclasses.fields(RunFindings)):
        artifact = getattr(state, stage.name)
        for f in dataclasses.fields(artifact):
            if f.type in ("str", "str | None"):
                setattr(artifact, f.name, f"value {i}")
            if f.metadata.get("skip"):
                skipped.add(f.name)
    state.log.notes.append("a note")
    state.log.stage_seconds["setup"] = 1.5
    rec = RunRecord.from_state(state)
    for stage in dataclasses.fields(RunFindings):
        assert getattr(rec, stage.name) == getattr(state, stage.name), stage.name
    written = rec.to_dict()
    assert skipped == {"hardware", "profile"}  # their own files
    assert {f.name for f in dataclasses.fields(RunRecord)} | {"schema"} == set(written)
    assert written["profiling"] == {"hardware_label": "value 1"}
    assert RunRecord.from_dict(written).to_dict() == written
