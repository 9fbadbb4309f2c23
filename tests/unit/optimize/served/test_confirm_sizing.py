"""The confirmation as served, sized to the percentile and the traffic: a p99 needs 3,000
requests (30 answers above it), a window of at least MIN_BLOCKS burst blocks, paid from what
the budget has left; the pooled figures carry each percentile's interval; and a report whose
interval does not decide says "not shown" and names the run that would (the demo's 126
requests in 8 s once printed "meets" for a p95 a 40-second run showed missed)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from test_run_record import record  # the RunRecord the run-record tests build

from infertune.config import Scenario, TrafficFacts
from infertune.loadgen.result import RequestRecord
from infertune.loadgen.schedules import ScheduleSpec
from infertune.measure.tail_interval import MIN_BLOCKS, TailInterval
from infertune.optimize.search.budget import Budget
from infertune.optimize.served.confirm import Segment, pooled
from infertune.optimize.served.confirm_sizing import (
    TAIL_SAMPLES,
    Extension,
    decisive_run,
    plan_extensions,
    point_verdict,
    project,
    segment_seconds,
)
from infertune.optimize.served.policy_sweep import SimStats, validation_key
from infertune.optimize.served.traffic import Validation, burst_block_s, record_intervals
from infertune.optimize.stages.confirm_served import (
    NEED_AFTER_CONFIRM_S,
    confirm_need_s,
    confirm_reserve_s,
    decisive_reserve_s,
)
from infertune.report.provenance import assert_all_figures_have_provenance
from infertune.report.run_report import build_run_report


def test_a_p99_needs_three_thousand_requests_and_a_p95_six_hundred() -> None:
    steady = TrafficFacts(pattern="steady", mean_rps=20, peak_rps=60)
    p99 = decisive_run("mean", {"p95": 15.0, "p99": 30.0}, steady, 20.0)
    assert (p99.requests, p99.duration_s, p99.percentile) == (3000, 150.0, "p99")
    p95 = decisive_run("mean", {"p95": 15.0}, steady, 20.0)
    assert (p95.requests, p95.duration_s) == (600, 30.0)
    assert TAIL_SAMPLES == 30
    assert p99.text() == ("3,000 requests over 150 s at 20 requests/s (30 answers above the "
                          "p99, 10 blocks of 1 s for the traffic's bursts)")


def test_spiky_traffic_needs_ten_on_off_cycles_whatever_the_count() -> None:
    spiky = TrafficFacts(pattern="spiky", mean_rps=100, peak_rps=300)
    run = decisive_run("peak", {"p95": 15.0}, spiky, 300.0)
    # 600 requests take 2 s at 300 req/s; ten 2 s + 8 s cycles take 100 s
    assert run.block_s == 10.0 and run.duration_s == 100.0 and run.requests == 30000
    assert run.duration_s == MIN_BLOCKS * run.block_s


def test_the_burst_block_follows_the_schedule_shape() -> None:
    assert burst_block_s(ScheduleSpec("poisson", rate=20.0)) == 1.0
    # gamma burstiness 0.25: squared CV 4, clusters of short gaps over 4 / rate seconds
    assert burst_block_s(ScheduleSpec("gamma", rate=2.0, burstiness=0.25)) == 2.0
    assert burst_block_s(ScheduleSpec("onoff", rate=5.0, burst_s=3.0, gap_s=9.0)) == 12.0


def test_segments_split_the_decisive_run_and_shrink_to_the_budget() -> None:
    steady = TrafficFacts(pattern="steady", mean_rps=20, peak_rps=60)
    runs = [decisive_run("mean", {"p99": 30.0}, steady, 20.0),  # 150 s
            decisive_run("peak", {"p99": 30.0}, steady, 60.0)]  # 50 s
    full = segment_seconds(runs, arms=2, visits=2, left_s=10_000, start_s=25, minimum_s=4)
    assert full == {"mean": 75.0, "peak": 25.0}
    # 2 arms x 2 visits x (75 + 25) s = 400 s wanted; 25 s start and 8 s of drains leave 167
    short = segment_seconds(runs, arms=2, visits=2, left_s=200, start_s=25, minimum_s=4)
    assert short == {"mean": round(75 * 167 / 400, 1), "peak": round(25 * 167 / 400, 1)}
    broke = segment_seconds(runs, arms=2, visits=2, left_s=10, start_s=25, minimum_s=4)
    assert broke == {"mean": 4, "peak": 4}
    # with the winner's extension the budget first holds one decisive run per rate (150 + 50 s
    # and 2 drains): of 367 s to pay, 165 are left for the ABBA segments beyond the winner's
    # share, so the segments take 75 * 165 / 200 at mean (one arm's extra 2 visits per rate)
    ext = segment_seconds(runs, arms=2, visits=2, left_s=400, start_s=25, minimum_s=4,
                          extend=True)
    assert ext == {"mean": round(75 * 165 / 200, 1), "peak": round(25 * 165 / 200, 1)}
    without = segment_seconds(runs, arms=2, visits=2, left_s=400, start_s=25, minimum_s=4)
    assert ext["mean"] < without["mean"]  # shorter ABBA: the rest pays the winner's top-up
    # a budget under one decisive run leaves the ABBA segments at their minimum
    assert segment_seconds(runs, arms=2, visits=2, left_s=200, start_s=25, minimum_s=4,
                           extend=True) == {"mean": 4, "peak": 4}
    # one finalist: its own segments are its top-up, the plain scaling holds
    assert segment_seconds(runs, arms=1, visits=2, left_s=150, start_s=25, minimum_s=4,
                           extend=True) == segment_seconds(runs, arms=1, visits=2, left_s=150,
                                                           start_s=25, minimum_s=4)


def test_a_rate_of_zero_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="rate must be > 0"):
        decisive_run("mean", {"p99": 30.0}, TrafficFacts(pattern="steady"), 0.0)


def _segment(latencies: list[float], gap_s: float, status: str = "200") -> Segment:
    records = [RequestRecord(i, i * gap_s, i * gap_s, i * gap_s + ms / 1000, status)
               for i, ms in enumerate(latencies)]
    return Segment(records, len(latencies) * gap_s)


def test_pooled_figures_carry_intervals_over_blocks_of_both_segments() -> None:
    # two 6-second segments of 60 answers: 12 one-second blocks, none spanning the two
    first = _segment([10.0 + (i % 10) for i in range(60)], 0.1)
    second = _segment([10.0 + (i % 10) for i in range(60)], 0.1)
    val = pooled([first, second], 10.0, block_s=1.0)
    p50 = val.intervals["p50"]
    assert p50.samples == 120 and p50.blocks == 12 and p50.value == pytest.approx(14.0)
    assert p50.low is not None and p50.high is not None and p50.low <= 14.0 <= p50.high
    assert val.intervals["p99"].high is None  # 120 answers cannot bound a p99
    # refused requests are no answers: the SLO is judged on what was answered
    refused = _segment([1.0] * 30, 0.1, status="503")
    again = pooled([first, refused], 10.0, block_s=1.0)
    assert again.intervals["p50"].samples == 60


def test_nothing_answered_has_no_interval() -> None:
    assert record_intervals([(_segment([1.0], 0.1, status="503").records, 1.0)],
                            block_s=1.0) == {}


def test_a_report_whose_interval_straddles_the_target_says_not_shown_and_what_decides(
        tmp_path: Path) -> None:
    run = record(tmp_path)  # steady traffic, p95 <= 50 and p99 <= 80 ms, peak 30 req/s
    assert run.sweep.sweep is not None
    pid = run.sweep.sweep.best.policy_id
    stats = SimStats(30, 7.0, 40.0, 70.0, shed=0.0, requests=400)
    run.sweep.validations = {validation_key("int8", pid, "peak"): Validation(
        stats, 29.5, 0.4, 13.0, [], intervals={
            "p95": TailInterval(0.95, 40.0, 35.0, 45.0, 400, 13, 1.0),
            "p99": TailInterval(0.99, 70.0, 60.0, 95.0, 400, 13, 1.0)})}  # straddles 80
    check = build_run_report(run).slo_check
    assert check is not None
    peak = next(p for p in check.points if p.label == "peak")
    assert [c.verdict for c in peak.checks] == ["meets", "not shown"]
    assert peak.verdict == "not shown" and peak.meets_slo is None and peak.goodput is None
    assert peak.decisive_run == ("3,000 requests over 100 s at 30 requests/s (30 answers above "
                                 "the p99, 10 blocks of 1 s for the traffic's bursts)")
    assert check.verdict == (
        f"Measured here, int8 with policy {pid} is not shown to meet the SLO "
        "(p95 <= 50 ms, p99 <= 80 ms) at the peak rate (p95 40.0 ms (95% CI 35.0-45.0) "
        "against 50 ms, p99 70.0 ms (95% CI 60.0-95.0) against 80 ms); the run that would "
        "decide it at the peak rate: " + peak.decisive_run + ".")
    assert peak.checks[1].why == ("p99 70.0 ms (95% CI 60.0-95.0, n=400, 13 x 1 s blocks) "
                                  "straddles the 80 ms target")
    assert_all_figures_have_provenance(build_run_report(run).to_dict())


def _validation(interval: TailInterval, *, shed: float = 0.0) -> Validation:
    stats = SimStats(rate=20.0, p50_ms=5.0, p95_ms=interval.value, p99_ms=interval.value * 2,
                     shed=shed, requests=interval.samples)
    return Validation(stats, 20.0, None, 60.0, [], {"p95": interval})


def test_a_projection_sizes_the_extension_to_the_gap_and_the_width() -> None:
    # p95 12 ms, 97.5% interval 10-15 ms, against a 14 ms target: not shown. The facing half
    # width is 3 ms, the gap 2 ms: about (3 * (1 + 0.84/2.24) / 2)^2 = 4.3 times the answers
    straddles = TailInterval(0.95, 12.0, 10.0, 15.0, 1000, 50, 1.0, confidence=0.975)
    run = decisive_run("mean", {"p95": 14.0}, TrafficFacts(pattern="steady"), 20.0)
    ext = project("mean", _validation(straddles), {"p95": 14.0}, run)
    assert ext.verdict_before == "not shown" and ext.requests_needed is not None
    assert 4000 <= ext.requests_needed <= 4600
    assert ext.seconds == pytest.approx((ext.requests_needed - 1000) / 20.0, abs=0.1)
    # an estimate on the target is never paid: no run length decides it
    on_target = TailInterval(0.95, 14.0, 12.0, 16.0, 1000, 50, 1.0, confidence=0.975)
    flat = project("mean", _validation(on_target), {"p95": 14.0}, run)
    assert flat.requests_needed is None and "sits on the" in flat.why
    # decided by ABBA: nothing to buy (a shed share over 1% misses whatever the interval)
    below = TailInterval(0.95, 8.0, 7.0, 9.0, 1000, 50, 1.0, confidence=0.975)
    assert project("mean", _validation(below), {"p95": 14.0}, run).verdict_before == "meets"
    assert point_verdict(_validation(below, shed=0.02), {"p95": 14.0}) == "misses"


def test_extensions_are_paid_cheapest_first_while_the_budget_holds() -> None:
    def ext(label: str, seconds: float) -> Extension:
        return Extension(label, 20.0, "not shown", 1000, 2000, seconds, False, "projected")

    plan = plan_extensions([ext("mean", 100.0), ext("peak", 30.0)], left_s=60.0)
    assert [e.paid for e in plan] == [False, True]
    assert "did not fit" in plan[0].why
    both = plan_extensions([ext("mean", 20.0), ext("peak", 30.0)], left_s=60.0)
    assert all(e.paid for e in both)
    assert Extension.from_dict(both[0].to_dict()) == both[0]


def test_the_report_states_the_confidence_its_intervals_were_taken_at(tmp_path: Path) -> None:
    # the confirmation that may extend looks twice, each look at 97.5%: the report must not
    # call those 95% intervals
    run = record(tmp_path)
    assert run.sweep.sweep is not None
    stats = SimStats(30, 7.0, 40.0, 70.0, shed=0.0, requests=4000)
    policy_id = run.sweep.sweep.best.policy_id
    run.sweep.validations = {validation_key("int8", policy_id, "peak"): Validation(
        stats, 29.5, 0.4, 130.0, [], intervals={
            "p95": TailInterval(0.95, 40.0, 35.0, 45.0, 4000, 130, 1.0, confidence=0.975),
            "p99": TailInterval(0.99, 70.0, 60.0, 75.0, 4000, 130, 1.0, confidence=0.975)})}
    check = build_run_report(run).slo_check
    assert check is not None
    peak = next(p for p in check.points if p.label == "peak")
    assert [c.confidence for c in peak.checks] == [0.975, 0.975]
    assert peak.verdict == "meets"
    assert "p99 70.0 ms (97.5% CI 60.0-75.0) against 80 ms" in (check.verdict or "")
    assert "97.5% interval" in peak.checks[1].basis


def _demo_scenario() -> Scenario:
    path = Path(__file__).resolve().parents[4] / "examples/scenarios/minilm-cpu.yaml"
    return Scenario.from_dict(yaml.safe_load(path.read_text()), source=str(path))


def test_a_budget_that_can_decide_holds_the_decisive_runs_back_from_the_stages_marks() -> None:
    sc = _demo_scenario()  # bursty, 20 and 60 req/s, p95 <= 15 and p99 <= 30 ms
    # one start (25 s) + ABBA at the 4 s minimum (2 arms x 2 visits x 2 rates x 5 s = 40) +
    # the winner topped up to 150 s at mean and 50 s at peak (142 + 42 s, a drain each) + 30
    assert decisive_reserve_s(sc, 600.0, quick=False) == 281.0
    # the default 5.5 minutes cannot hold it and keep 240 s for the stages before it
    assert decisive_reserve_s(sc, 330.0, quick=False) == 0.0
    assert decisive_reserve_s(sc, 600.0, quick=True) == 0.0
    clock = [0.0]
    budget = Budget(600.0, clock=lambda: clock[0], reserved_s=281.0)
    assert budget.until(0.5) == pytest.approx((600 - 281) * 0.5)
    assert budget.left() == 600.0  # the reserve is for the last stage: left() still counts it
    clock[0] = 300.0
    assert budget.until(0.8) == 0.0  # the marks are spent; the serving stage has 300 s


def test_the_pre_screen_leaves_the_reserve_when_it_can_and_the_minimum_when_not(
        tmp_path: Path) -> None:
    state = SimpleNamespace(options=SimpleNamespace(quick=False))
    minimum = confirm_need_s(False) + NEED_AFTER_CONFIRM_S
    clock = [0.0]
    budget = Budget(600.0, clock=lambda: clock[0], reserved_s=281.0)
    assert confirm_reserve_s(state, budget) == 281.0
    clock[0] = 600.0 - 100.0  # 100 s left: the minimum confirmation still fits
    assert confirm_reserve_s(state, budget) == minimum
    clock[0] = 600.0 - minimum + 1
    assert confirm_reserve_s(state, budget) == 0.0
