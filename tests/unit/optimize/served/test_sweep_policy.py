"""The serving-policy sweep on a fake queue whose answers are known exactly."""

from __future__ import annotations

import pytest

from infertune.config import ServePolicy
from infertune.optimize.served.policy_sweep import (
    PolicyResult,
    SimStats,
    SweepGrid,
    SweepResult,
    cost_per_1k,
    goodput,
    instances_needed,
    measured_key,
    policy_id,
    rank_key,
    ranked,
    rerank_measured,
    sweep,
)


def service_ms(batch: int) -> float:
    return 4.0 + 1.0 * batch  # 5 ms alone, 20 ms for 16


def fake_sim(policy: ServePolicy, rate: float) -> SimStats:
    """Latency = wait + service; capacity = workers * b / service(b); over capacity -> shed.
    Batching fills up to max_batch at high load and pays the wait window at low load."""
    b = policy.max_batch_size
    cap = policy.workers * b / service_ms(b) * 1000.0
    fill = min(b, max(1, int(rate * policy.max_wait_ms / 1000.0) + 1))
    util = rate / cap
    if util >= 1.0:
        return SimStats(rate, 1e9, 1e9, 1e9, shed=1 - 1 / util)
    wait = policy.max_wait_ms if fill < b else 0.0
    queue = service_ms(fill) * util / (1 - util)
    p50 = wait + service_ms(fill) + queue
    return SimStats(rate, p50, p50 * 1.5, p50 * 2.0, shed=0.0, utilisation=util)


def test_cost_per_1k_is_hourly_cost_over_requests_per_hour() -> None:
    assert cost_per_1k(0.36, 100.0) == pytest.approx(0.001)
    assert cost_per_1k(None, 100.0) is None
    assert cost_per_1k(0.36, 0.0) is None


def test_goodput_bisects_to_the_slo_edge() -> None:
    policy = ServePolicy(max_batch_size=1, max_wait_ms=0.0, workers=1)
    # fake: p99 = 2 * 5 / (1 - r/200); p99 <= 30 ms  <=>  r <= 200 * (2/3) = 133.3
    found = goodput(fake_sim, policy, {"p99": 30.0}, high=200.0, steps=20)
    assert found == pytest.approx(400.0 / 3.0, rel=1e-3)
    assert goodput(fake_sim, policy, {"p99": 1.0}, high=200.0) == 0.0


def test_grid_skips_waiting_for_batches_of_one() -> None:
    grid = SweepGrid((1, 4), (0.0, 2.0), (1,), (64,))
    ids = [policy_id(p) for p in grid.policies()]
    assert ids == ["b1-w0ms-x1-q64", "b4-w0ms-x1-q64", "b4-w2ms-x1-q64"]


def test_sweep_ranks_slo_keepers_first_and_reports_goodput_and_cost() -> None:
    grid = SweepGrid((1, 4, 16), (0.0, 2.0, 10.0), (1, 2), (256,))
    result = sweep(fake_sim, variant_id="v", slo={"p99": 40.0}, mean_rps=100.0,
                   peak_rps=400.0, grid=grid, service_ms=service_ms, cost_per_hour_usd=0.36,
                   keep=3)
    best = result.best
    assert best.at_peak.meets({"p99": 40.0})
    assert best.goodput_rps is not None and best.goodput_rps >= 400.0
    assert best.cost_per_1k_usd == pytest.approx(0.36 / (best.goodput_rps * 3.6))
    # the no-batching reference is always kept, and batching is compared against it
    assert any(r.policy["max_batch_size"] == 1 for r in result.ranked)
    window = [b for b in result.batching
              if b.rate_label == "low load, wait window" and b.percentile == "p50"]
    assert window and window[0].verdict == "hurts"  # the wait window at low load costs latency
    assert window[0].batched_ms - window[0].unbatched_ms == pytest.approx(10.0)
    peak = [b for b in result.batching if b.rate_label == "peak" and b.percentile == "p99"]
    assert peak[0].verdict == "helps"
    assert result.evaluated == len(grid.policies())


def test_a_goodput_search_the_time_left_cannot_afford_is_not_run() -> None:
    # optimize checks its budget before each leader's search (stages/sweep.py): a spiky
    # scenario's search at a tiny MLP's capacity bound would simulate ~45M arrivals
    grid = SweepGrid((1, 4, 16), (0.0, 2.0), (1, 2), (256,))
    asked: list[tuple[str, float]] = []

    def afford(pid: str, bound: float) -> bool:
        asked.append((pid, bound))
        return bound < 1000.0  # only the searches up to a low capacity bound fit

    result = sweep(fake_sim, variant_id="v", slo={"p99": 40.0}, mean_rps=100.0,
                   peak_rps=400.0, grid=grid, service_ms=service_ms, cost_per_hour_usd=0.36,
                   keep=3, afford_goodput=afford)
    assert {pid for pid, _ in asked} == {r.policy_id for r in result.ranked}
    by_id = {r.policy_id: r for r in result.ranked}
    for pid, bound in asked:
        r = by_id[pid]
        assert r.capacity_rps == pytest.approx(bound)
        if bound < 1000.0:
            assert r.goodput_rps is not None and r.cost_per_1k_usd is not None
        else:  # not searched: unknown, not zero
            assert r.goodput_rps is None and r.cost_per_1k_usd is None
    assert any(b >= 1000.0 for _, b in asked) and any(b < 1000.0 for _, b in asked)


def test_sweep_result_round_trips() -> None:
    grid = SweepGrid((1, 8), (0.0, 5.0), (1,), (64,))
    result = sweep(fake_sim, variant_id="v", slo={"p95": 50.0}, mean_rps=50.0, peak_rps=150.0,
                   grid=grid, service_ms=service_ms, cost_per_hour_usd=0.1)
    again = SweepResult.from_dict(result.to_dict())
    assert again.to_dict() == result.to_dict()
    assert isinstance(again.ranked[0], PolicyResult)


def test_instances_for_the_peak() -> None:
    assert instances_needed(100.0, 30.0) == 4
    assert instances_needed(100.0, None) is None


def test_the_measurement_decides_among_the_load_tested_policies() -> None:
    slo = {"p99": 30.0}
    grid = SweepGrid((1, 4, 16), (0.0,), (1,), (64,))
    result = sweep(fake_sim, variant_id="v", slo=slo, mean_rps=50.0, peak_rps=100.0, grid=grid,
                   service_ms=service_ms)
    first, second = result.ranked[0], result.ranked[1]
    # measured through the runtime: the simulator's favourite misses the SLO at peak, the
    # runner-up keeps it, so the runner-up is recommended; untested policies come after
    first.validated_peak = SimStats(100.0, 20.0, 35.0, 45.0, shed=0.0)
    second.validated_peak = SimStats(100.0, 10.0, 18.0, 25.0, shed=0.0)
    untested = result.ranked[2:]
    assert len(untested) == 1
    rerank_measured(result)
    assert result.best is second and result.ranked[1] is first
    assert result.ranked[2:] == untested
    # nothing load-tested: the simulated order stands
    again = sweep(fake_sim, variant_id="v", slo=slo, mean_rps=50.0, peak_rps=100.0, grid=grid,
                  service_ms=service_ms)
    order = [r.policy_id for r in again.ranked]
    rerank_measured(again)
    assert [r.policy_id for r in again.ranked] == order


def _policy_result(workers: int, peak: SimStats, mean: SimStats) -> PolicyResult:
    policy = ServePolicy(max_batch_size=1, max_wait_ms=0.0, workers=workers, max_queue=64)
    return PolicyResult(policy_id(policy), policy.model_dump(mode="json"), mean, peak)


def test_when_the_slo_is_missed_a_shed_counts_against_a_policy_before_its_tail() -> None:
    # the demo's case: one worker behind a long input sheds the requests queued after it and
    # answers the rest fast; two workers answer nearly all of them, a little later
    slo = {"p95": 15.0, "p99": 30.0}
    one = _policy_result(1, SimStats(60.0, 10.0, 32.0, 45.0, shed=0.09),
                         SimStats(20.0, 7.0, 30.0, 41.0, shed=0.04))
    two = _policy_result(2, SimStats(60.0, 11.0, 38.0, 58.0, shed=0.03),
                         SimStats(20.0, 8.0, 35.0, 50.0, shed=0.01))
    assert min([one, two], key=lambda r: rank_key(r, slo)) is two
    # the same rule on the load-tested figures
    one.validated_peak, one.validated_mean = one.at_peak, one.at_mean
    two.validated_peak, two.validated_mean = two.at_peak, two.at_mean
    assert min([one, two], key=lambda r: measured_key(r, slo)) is two
    # a policy that keeps the SLO still comes first, whatever the others shed
    keeper = _policy_result(1, SimStats(60.0, 5.0, 12.0, 20.0, shed=0.005),
                            SimStats(20.0, 4.0, 10.0, 15.0, shed=0.0))
    assert min([one, two, keeper], key=lambda r: rank_key(r, slo)) is keeper
    # both keep it: sheds (<= 1% each) do not matter, the tail at peak does
    close = _policy_result(2, SimStats(60.0, 5.0, 12.0, 18.0, shed=0.009),
                           SimStats(20.0, 4.0, 10.0, 15.0, shed=0.0))
    assert min([keeper, close], key=lambda r: rank_key(r, slo)) is close


def test_a_rate_not_load_tested_ranks_behind_one_measured_missing_the_slo() -> None:
    slo = {"p99": 30.0}
    tested = _policy_result(1, SimStats(60.0, 10.0, 32.0, 45.0, shed=0.2),
                            SimStats(20.0, 7.0, 30.0, 41.0, shed=0.1))
    untested = _policy_result(2, SimStats(60.0, 5.0, 12.0, 20.0, shed=0.0),
                              SimStats(20.0, 4.0, 10.0, 15.0, shed=0.0))
    tested.validated_peak, tested.validated_mean = tested.at_peak, tested.at_mean
    assert min([untested, tested], key=lambda r: measured_key(r, slo)) is tested


def test_sheds_within_the_same_percent_leave_the_choice_to_the_tail() -> None:
    slo = {"p95": 15.0, "p99": 30.0}
    long_tail = _policy_result(2, SimStats(60.0, 20.0, 120.0, 172.0, shed=0.056),
                               SimStats(20.0, 15.0, 100.0, 145.0, shed=0.009))
    short_tail = _policy_result(2, SimStats(60.0, 10.0, 60.0, 92.0, shed=0.057),
                                SimStats(20.0, 8.0, 50.0, 85.0, shed=0.012))
    assert min([long_tail, short_tail], key=lambda r: rank_key(r, slo)) is short_tail


def _result(pid: str, p99_peak: float, capacity: float, *, shed: float = 0.0,
            batch: int = 1) -> PolicyResult:
    policy = ServePolicy(max_batch_size=batch, max_wait_ms=0.0, workers=2)
    stats = SimStats(60.0, p99_peak / 2, p99_peak * 0.8, p99_peak, shed=shed)
    return PolicyResult(pid, policy.model_dump(exclude_none=True), at_mean=stats,
                        at_peak=stats, capacity_rps=capacity)


def test_tails_within_ten_percent_are_a_tie_won_by_capacity() -> None:
    """The demo's case: batching with no wait window and no batching meet the SLO with tails
    a few percent apart; the larger capacity wins, so the configuration has headroom."""
    slo = {"p99": 30.0}
    plain = _result("b1", 14.1, 170.0)
    batched = _result("b8", 14.8, 900.0, batch=8)  # within 10% of 14.1
    slower = _result("b16", 16.0, 2000.0, batch=16)  # 13% above the best: not a tie
    shedding = _result("b2", 5.0, 5000.0, shed=0.02)  # misses the SLO: never ahead
    order = [r.policy_id for r in ranked([slower, plain, shedding, batched], slo)]
    assert order == ["b8", "b1", "b16", "b2"]
    # the plain key alone still orders by the tail
    assert min([plain, batched], key=lambda r: rank_key(r, slo)) is plain
    # the tie is judged afresh after the first group: b16 leads what is left
    assert [r.policy_id for r in ranked([slower, _result("b4", 17.0, 9000.0, batch=4)],
                                        slo)] == ["b4", "b16"]
