"""The report's scale-out section: instances at the peak from the measured per-instance goodput
and the Ray Serve settings that deploy them, every number with its source; without a measured
goodput (nothing met the SLO) or a measured cold start it says so instead of inventing one."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from infertune.config import Scenario, ServePolicy
from infertune.measure.coldstart import ColdStart
from infertune.measure.curve import CurvePoint, ServiceCurve
from infertune.measure.profile import Profile
from infertune.measure.tail_interval import TailInterval
from infertune.optimize.findings import by_stage
from infertune.optimize.record import RunRecord
from infertune.optimize.served.policy_sweep import SimStats, SweepGrid, sweep, validation_key
from infertune.optimize.served.traffic import Validation
from infertune.optimize.state import RunPaths
from infertune.report.provenance import assert_all_figures_have_provenance, provenance_problems
from infertune.report.render_html import render_html
from infertune.report.render_md import render_markdown
from infertune.report.run_report import build_run_report, write_run_report
from infertune.report.run_scaleout import scale_out
from infertune.report.run_slo import slo_check
from infertune.report.schema import Figure, Report, ScaleOut

HW = "test cpu (2 cores)"


def fake_sim(policy: ServePolicy, rate: float) -> SimStats:
    service = 4.0 + policy.max_batch_size
    return SimStats(rate, service, service * 1.5, service * 2.0, shed=0.0, utilisation=0.5)


def curve() -> ServiceCurve:
    points = [CurvePoint(b, None, ms, ms * 1.2, ms, 5, b / (ms / 1000))
              for b, ms in ((1, 5.0), (4, 8.0))]
    return ServiceCurve(points=points, runtime="onnxruntime")


def profile(cold_s: float) -> Profile:
    # only the cold start is read by the scale-out section
    cold = ColdStart(import_s=cold_s - 0.5, load_s=0.4, first_inference_ms=100.0,
                     settled_after=3, steady_ms=5.0)
    return cast(Profile, SimpleNamespace(cold_start=cold))


def record(*, mean: SimStats | None, peak: SimStats | None, cold_s: float | None = 6.0,
           peak_achieved: float = 30.0) -> RunRecord:
    """A run whose chosen policy was load-tested at the mean (10 req/s) and peak (30 req/s)
    with the given measured stats (None: that rate was not load-tested)."""
    scenario = Scenario.model_validate({
        "slo": {"p95_ms": 50, "p99_ms": 80},
        "traffic": {"pattern": "bursty", "mean_rps": 10, "peak_rps": 30},
        "deployment": {"cost_per_hour_usd": 0.2}})
    slo = scenario.slo.targets()
    result = sweep(fake_sim, variant_id="int8", slo=slo, mean_rps=10, peak_rps=30,
                   grid=SweepGrid((1, 4), (0.0,), (1,), (64,)),
                   service_ms=lambda b: 4.0 + b, cost_per_hour_usd=0.2, timeout_ms=80.0)
    pid = result.best.policy_id
    validations = {}
    for label, stats, rate in (("mean", mean, 10.0), ("peak", peak, peak_achieved)):
        if stats is not None:
            validations[validation_key("int8", pid, label)] = Validation(
                stats, rate, 0.4, 6.0, [], intervals=tight(stats))
    return RunRecord(
        model="m", scenario=scenario, data_source="held.jsonl", quick=cold_s is None,
        task="embedding", baseline_runtime="torch", quality_count=64, **by_stage(hardware_label=HW,
        profile=profile(cold_s) if cold_s is not None else None, sweep=result,
        validations=validations, curve=curve()))


def tight(stats: SimStats) -> dict[str, TailInterval]:
    """Intervals 10% either side of each percentile, over 3,000 answers in 60 one-second
    blocks: decisive on either side of these tests' targets."""
    return {k: TailInterval(int(k[1:]) / 100, v, 0.9 * v, 1.1 * v, 3000, 60, 1.0)
            for k in ("p50", "p95", "p99") if (v := stats.percentile(k)) is not None}


def section(run: RunRecord) -> ScaleOut | None:
    return scale_out(run, slo_check(run))


MEETS = SimStats(10, 6.0, 9.0, 12.0, shed=0.0, requests=3000)
MISSES = SimStats(30, 60.0, 120.0, 200.0, shed=0.0, requests=3000)


def test_instances_at_the_peak_come_from_the_measured_goodput_with_ray_settings() -> None:
    run = record(mean=MEETS, peak=MISSES)
    s = section(run)
    assert s is not None and s.variant_id == "int8"
    # the mean rate (10 req/s achieved, nothing shed) kept the SLO; the peak did not
    assert s.per_instance_goodput is not None and s.per_instance_goodput.value == 10.0
    assert s.per_instance_goodput.source == "measured" and s.per_instance_goodput.samples == 3000
    assert s.instances_at_peak is not None and s.instances_at_peak.value == 3  # ceil(30 / 10)
    assert "at most 3 instance(s)" in s.statement
    # Ray Serve settings: max_replicas is the instances at the peak, capacity the goodput
    assert s.settings["max_replicas"] == 3
    capacity = s.derivations["replica_capacity_rps"]
    assert capacity.value == 10.0 and capacity.source == "measured"
    # bursty traffic steps to the peak faster than a replica starts: the warm pool is all 3
    assert s.settings["min_replicas"] == s.settings["initial_replicas"] == 3
    # Little's law at the measured goodput: the chosen policy batches 1 (W = 0 + 2 x 5 = 10 ms
    # fits the 80 ms p99); 10 req/s x 0.01 s = 0.1 requests, raised to 1
    assert run.sweep.sweep is not None and run.sweep.sweep.best.policy["max_batch_size"] == 1
    assert s.settings["target_ongoing_requests"] == 1.0
    assert s.settings["max_ongoing_requests"] == 2
    # Ray's default 10 s push on an unknown cluster: 2 pushes up, 5 x that down, look-back 50
    assert s.settings["upscale_delay_s"] == 20.0 and s.settings["downscale_delay_s"] == 100.0
    assert s.settings["look_back_period_s"] == 50.0
    assert set(s.derivations) >= {"target_ongoing_requests", "min_replicas", "max_replicas",
                                  "upscale_delay_s", "downscale_delay_s"}
    assert all(f.source == "estimate" and f.basis.startswith("derived: ")
               for k, f in s.derivations.items() if k != "replica_capacity_rps")
    # the whole report (built without the profile stand-in) carrying this section
    run.profiling.profile = None
    report = build_run_report(run).model_copy(update={"scale_out": s})
    data = report.to_dict()
    assert_all_figures_have_provenance(data)
    assert Report.from_dict(data).to_dict() == data
    md, html = render_markdown(report), render_html(report)
    assert "### Scale-out (Ray Serve)" in md and "max_replicas=3" in md
    assert "Scale-out (Ray Serve)" in html and "max_replicas=3" in html


def test_the_peak_itself_kept_the_slo_so_one_instance_is_enough() -> None:
    ok_peak = SimStats(30, 6.0, 9.0, 12.0, shed=0.0, requests=3000)
    s = section(record(mean=MEETS, peak=ok_peak, peak_achieved=30.0))
    assert s is not None and s.per_instance_goodput is not None
    assert s.per_instance_goodput.value == 30.0
    inst = s.instances_at_peak
    assert inst is not None and inst.value == 1 and inst.source == "measured"
    assert inst.samples == 3000 and inst.artifact == "serving.json"
    assert "at the peak rate of 30 requests/s" in s.statement
    assert s.derivations["replica_capacity_rps"].value == 30.0
    assert s.settings["max_replicas"] == 1 and s.settings["min_replicas"] == 1


def test_a_capacity_short_of_the_peak_is_never_raised_to_it_and_labelled_measured() -> None:
    # the schedule's sample at the 30 req/s peak achieved 27.5 req/s, within the SLO: the
    # measured capacity is 27.5 (before session 9 it was reported as 30.0, "measured")
    ok_peak = SimStats(30, 6.0, 9.0, 12.0, shed=0.0, requests=3000)
    s = section(record(mean=MEETS, peak=ok_peak, peak_achieved=27.5))
    assert s is not None and s.per_instance_goodput is not None
    assert s.per_instance_goodput.value == 27.5
    capacity = s.derivations["replica_capacity_rps"]
    assert capacity.value == 27.5 and capacity.source == "measured"
    inst = s.instances_at_peak
    assert inst is not None and inst.value == 2 and inst.source == "estimate"  # ceil(30/27.5)
    assert s.settings["max_replicas"] == 2
    assert "at most 2 instance(s)" in s.statement


def test_provenance_flags_a_measured_figure_derived_from_an_estimate() -> None:
    peak = Figure(value=30.0, unit="requests/s", source="estimate", basis="stated peak")
    wrong = Figure(value=30.0, unit="requests/s", source="measured", samples=180,
                   basis="max(measured, peak)", inputs=[peak], artifact="serving.json")
    problems = provenance_problems({"capacity": wrong.to_dict()})
    assert problems == ["$.capacity: labelled measured but derived from the estimate at "
                        "$.capacity.inputs[0]; label it an estimate"]
    unsampled = Figure(value=3.0, unit="ms", source="measured", basis="timed",
                       artifact="profile.json")
    assert provenance_problems({"p": unsampled.to_dict()}) == [
        "$.p: labelled measured without a sample count"]
    deep = wrong.model_copy(update={"inputs": [Figure(value=1.0, unit="x", source="measured",
                                                      samples=5, basis="b", inputs=[peak],
                                                      artifact="run.json")]})
    assert len(provenance_problems({"c": deep.to_dict()})) == 2  # the inner one and the outer
    assert provenance_problems({"ok": peak.to_dict()}) == []


def test_missed_everywhere_it_shows_the_percentile_reached_and_no_count() -> None:
    run = record(mean=SimStats(10, 60.0, 90.0, 150.0, shed=0.0, requests=60), peak=MISSES)
    sweep = run.sweep.sweep
    assert sweep is not None and sweep.best.goodput_rps  # the simulator says it fits
    s = section(run)
    assert s is not None and s.per_instance_goodput is None
    assert s.statement.startswith("No per-instance goodput was measured: no tested rate met")
    assert "p99 150.0 ms against 80 ms at the mean rate" in s.statement
    assert "p99 200.0 ms against 80 ms at the peak rate" in s.statement
    # the measurements contradict the simulator: no count, no settings, and why
    assert s.instances_at_peak is None and s.settings == {} and s.derivations == {}
    assert s.warnings and s.warnings[0].startswith("no instance count and no Ray Serve")
    run.profiling.profile = None
    assert_all_figures_have_provenance(build_run_report(run).to_dict())


def test_without_load_tests_it_sizes_from_the_simulator_labelled_an_estimate() -> None:
    run = record(mean=None, peak=None)
    s = section(run)
    assert s is not None and s.per_instance_goodput is None
    assert "load tests of the chosen policy did not run" in s.statement
    assert run.sweep.sweep is not None
    sim = run.sweep.sweep.best.goodput_rps
    assert sim is not None
    inst = s.instances_at_peak
    assert inst is not None and inst.source == "estimate" and "simulator" in inst.basis
    assert inst.value == math.ceil(30 / sim)
    capacity = s.derivations["replica_capacity_rps"]
    assert capacity.source == "estimate" and capacity.value == pytest.approx(sim, rel=1e-3)
    assert s.settings["max_replicas"] == inst.value


def test_a_run_without_a_cold_start_gets_no_ray_settings_and_says_why() -> None:
    s = build_run_report(record(mean=MEETS, peak=MISSES, cold_s=None)).scale_out
    assert s is not None and s.settings == {} and s.derivations == {}
    assert s.instances_at_peak is not None and s.instances_at_peak.value == 3
    assert any(w.startswith("no Ray Serve settings derived: this run: no measured cold start")
               and "--engine ray" in w for w in s.warnings)


def test_no_sweep_no_section_and_the_saved_report_carries_it(tmp_path: Path) -> None:
    run = record(mean=MEETS, peak=MISSES, cold_s=None)
    run.save(RunPaths(tmp_path))
    saved = write_run_report(tmp_path)
    assert saved["scale_out"]["instances_at_peak"]["value"] == 3
    assert saved["scale_out"]["warnings"][0].startswith("no Ray Serve settings derived")
    run.sweep.sweep = None
    assert build_run_report(run).scale_out is None
