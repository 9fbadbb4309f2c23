"""Reading a run folder's measurements into the autoscaling plan; malformed files are one-line
errors naming the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infertune.config import ServePolicy
from infertune.errors import ConfigError
from infertune.measure.curve import CurvePoint, ServiceCurve
from infertune.serve.engines.autoscale import Limits
from infertune.serve.engines.run_facts import Sourced, plan_for_run, read_run

SCENARIO = """
slo: {p95_ms: 40, p99_ms: 60}
traffic: {pattern: bursty, mean_rps: 100, peak_rps: 900}
deployment: {cost_per_hour_usd: 1.0}
constraints: {cost_ceiling_usd_per_1k: 0.002}
inputs: {typical: {batch_size: 2}}
"""


def _curve() -> dict[str, object]:
    points = [CurvePoint(b, None, ms, ms * 1.2, ms, 5, b / (ms / 1000))
              for b, ms in ((1, 5.0), (4, 10.0), (16, 30.0))]
    return ServiceCurve(points=points, runtime="torch").to_dict()


def _run(tmp_path: Path, *, cold: float | None = 4.0) -> Path:
    run = tmp_path / "run"
    run.mkdir(parents=True)
    (run / "scenario.yaml").write_text(SCENARIO)
    (run / "serving.json").write_text(json.dumps({
        "curve": _curve(), "right_sizing": {"goodput_per_instance": 300.0}}))
    profile = {"cold_start": {"import_s": 3.0, "load_s": 0.5, "first_inference_ms": 500.0,
                              "total_s": cold}} if cold is not None else {}
    (run / "profile.json").write_text(json.dumps(profile))
    return run


def test_read_run_collects_every_fact_with_its_source(tmp_path: Path) -> None:
    facts = read_run(_run(tmp_path))
    assert facts.demand.slo_ms == 60.0 and "p99" in facts.demand.slo_source
    assert (facts.demand.mean_rps, facts.demand.peak_rps, facts.demand.pattern) == (
        100.0, 900.0, "bursty")
    assert (facts.cost_per_hour_usd, facts.cost_ceiling_usd_per_1k) == (1.0, 0.002)
    assert facts.inputs_per_request == 2.0
    assert facts.service_ms is not None
    assert facts.service_ms[1] == 5.0 and facts.service_ms[4] == 10.0
    assert facts.service_ms[8] == pytest.approx(10.0 + 4 * 20.0 / 12)  # interpolated
    assert facts.goodput == Sourced(300.0, facts.goodput.source if facts.goodput else "")
    assert facts.goodput is not None and facts.goodput.source.startswith("estimate")
    assert facts.cold_start is not None and facts.cold_start.value == 4.0


def test_plan_for_run_uses_the_run_and_the_policy(tmp_path: Path) -> None:
    plan = plan_for_run(_run(tmp_path), ServePolicy(max_batch_size=16, max_wait_ms=2.0),
                        Limits(cluster_cpus=8.0))
    # W(16) = 2 + 60 = 62 > 60; W(8) = 2 + 2 x 16.67 = 35.3 fits: b* = 8
    assert "b*=8" in plan.target_ongoing_requests.reasoning
    assert "/ 2 inputs per request" in plan.target_ongoing_requests.reasoning
    assert plan.replica_capacity_rps.value == 300.0  # the run's goodput
    assert plan.min_replicas.value == 3  # bursty: the 900 req/s peak at once / 300
    # the cluster holds 8; cost: 3.6 x 900 x 0.002 / 1.0 = 6.48 -> 6 affordable; the
    # forecast's 3 sets only the warm pool
    assert plan.max_replicas.value == 6
    override = plan_for_run(_run(tmp_path / "b"), ServePolicy(),
                            cold_start=Sourced(20.0, "measured on the cluster"))
    assert override.downscale_delay_s.value == 100.0  # 5 x (2 pushes of Ray's default 10 s)
    assert override.look_back_period_s.value == 50.0
    measured = plan_for_run(_run(tmp_path / "c"), ServePolicy(max_batch_size=16),
                            goodput=Sourced(450.0, "measured: 2-minute load test"))
    assert measured.min_replicas.value == 2  # ceil(900 / 450)
    assert measured.max_replicas.value == 6  # what the cost ceiling pays for at the peak
    assert "measured: 2-minute load test" in measured.replica_capacity_rps.reasoning


def test_missing_and_malformed_measurements_name_the_fix(tmp_path: Path) -> None:
    run = _run(tmp_path, cold=None)
    with pytest.raises(ConfigError, match="no measured cold start .profile.json.; rerun"):
        plan_for_run(run, ServePolicy())
    (run / "serving.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"serving.json: not valid JSON at line 1, column 2 "
                       r".*; rerun infertune optimize"):
        read_run(run)
    (run / "serving.json").write_text(json.dumps({"curve": {"points": "x"}}))
    with pytest.raises(ConfigError, match="serving.json: ServiceCurve.points: expected a list, "
                       "found 'x'; rerun"):
        read_run(run)
    (run / "serving.json").write_text("[]")
    with pytest.raises(ConfigError, match="top level must be an object"):
        read_run(run)
    (run / "serving.json").write_text("{}")
    with pytest.raises(ConfigError, match="no measured service curve"):
        plan_for_run(run, ServePolicy())
    assert read_run(tmp_path / "empty").service_ms is None  # nothing there: nothing invented


def test_the_reports_measured_goodput_replaces_the_simulated_one(tmp_path: Path) -> None:
    run = _run(tmp_path)
    capacity = {"value": 200.0, "unit": "req/s per replica", "source": "measured",
                "basis": "measured goodput of one replica (load test at the mean rate)"}
    (run / "report.json").write_text(json.dumps(
        {"scale_out": {"derivations": {"replica_capacity_rps": capacity}}}))
    facts = read_run(run)
    assert facts.goodput is not None and facts.goodput.value == 200.0
    assert facts.goodput.source.startswith("measured: per-instance goodput at the SLO")
    assert plan_for_run(run, ServePolicy()).min_replicas.value == 5  # ceil(900 / 200)
    # an estimate in the report leaves the run's own (simulated) figure in place
    (run / "report.json").write_text(json.dumps({"scale_out": {"derivations": {
        "replica_capacity_rps": {**capacity, "source": "estimate"}}}}))
    facts = read_run(run)
    assert facts.goodput is not None and facts.goodput.value == 300.0
    (run / "report.json").write_text(json.dumps({"scale_out": {"derivations": {
        "replica_capacity_rps": {**capacity, "value": 0}}}}))
    with pytest.raises(ConfigError, match="replica_capacity_rps has no positive value"):
        read_run(run)
