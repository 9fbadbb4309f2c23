"""The scenario's traffic shape as schedules, the simulator bridge, and value round trips."""

from __future__ import annotations

import pytest

from infertune.config import ServePolicy, TrafficFacts
from infertune.optimize.search.timing import Skipped
from infertune.optimize.served.input_options import InputOptions, TimedOption
from infertune.optimize.served.policy_sweep import SimStats
from infertune.optimize.served.traffic import (
    MIN_WINDOW_S,
    SIM_MAX_REQUESTS,
    Contention,
    Validation,
    make_simulator,
    schedule_for,
    sim_stats,
)


class FlatCurve:
    def latency_ms(self, batch_size: int, seq_len: int | None = None) -> float:
        return 2.0 + 0.5 * batch_size


@pytest.mark.parametrize(("pattern", "shape", "scv_low", "scv_high"), [
    ("steady", "poisson", 0.8, 1.2), ("bursty", "gamma", 3.0, 5.0)])
def test_patterns_map_to_shapes_with_their_burstiness(pattern, shape, scv_low, scv_high) -> None:
    sched = schedule_for(TrafficFacts(pattern=pattern, mean_rps=50, peak_rps=100), 50.0)
    assert sched.spec.shape == shape
    stats = sched.stats()
    assert stats.mean_rate == pytest.approx(50.0, rel=0.1)
    assert scv_low < stats.gap_scv < scv_high


def test_spiky_keeps_the_mean_rate_with_peak_over_mean_bursts() -> None:
    sched = schedule_for(TrafficFacts(pattern="spiky", mean_rps=20, peak_rps=60), 20.0,
                         duration_s=400.0)
    assert sched.spec.shape == "onoff"
    assert sched.spec.peak_rate / sched.spec.rate == pytest.approx(3.0)
    assert sched.stats().mean_rate == pytest.approx(20.0, rel=0.15)


def test_simulator_bridge_adds_overhead_and_contention() -> None:
    traffic = TrafficFacts(pattern="steady", mean_rps=5, peak_rps=5)
    policy = ServePolicy(max_batch_size=1, max_wait_ms=0.0, workers=2)
    contention = Contention({1: 1.0, 2: 2.0}, 1, 5)
    plain = make_simulator(FlatCurve(), traffic)(policy, 1.0)
    overhead = make_simulator(FlatCurve(), traffic, overhead_ms=1.0)
    slowed = make_simulator(FlatCurve(), traffic, contention=contention, overhead_ms=1.0)
    # at 1 req/s on 2 workers requests almost never overlap: p50 is the service time plus the
    # overhead, and the contention of two workers at once does not apply
    assert plain.p50_ms == pytest.approx(2.5, rel=0.01)
    assert slowed(policy, 1.0).p50_ms == pytest.approx(2.5 + 1.0, rel=0.01)
    assert plain.shed == 0.0 and plain.requests > 0
    # at 400 req/s both workers run most of the time: 3.5 ms each would keep up (70% busy),
    # slowed 2x by each other they cannot
    busy_alone, busy_slowed = overhead(policy, 400.0), slowed(policy, 400.0)
    assert busy_alone.shed == 0.0 and busy_alone.p50_ms < 10.0
    assert busy_slowed.p50_ms > 2 * busy_alone.p50_ms


def test_contention_extrapolates_linearly_beyond_measured_workers() -> None:
    c = Contention({1: 1.0, 2: 1.6}, 1, 10)
    assert c.factor(2) == 1.6
    assert c.factor(4) == pytest.approx(3.2)
    assert Contention.from_dict(c.to_dict()) == c


def test_sim_stats_treats_nothing_completed_as_unbounded() -> None:
    class Res:
        p50_ms = p95_ms = p99_ms = None
        rejected, shed, requests, utilisation, mean_batch_size = 10, 0, 10, 1.0, 0.0

    stats = sim_stats(Res(), 5.0)
    assert stats.p99_ms == float("inf") and stats.shed == 1.0
    assert not stats.meets({"p99": 100.0})


def test_round_trips() -> None:
    timed = TimedOption("t", "a", "b", 1.0, 0.5, 2.0, 1.0, 0.5, 0.4, 0.6, "B is faster", 30)
    opts = InputOptions(None, 128, 0.01, timed, None, ["note"])
    assert InputOptions.from_dict(opts.to_dict()) == opts
    val = Validation(SimStats(5.0, 1.0, 2.0, 3.0, 0.0), 4.9, 0.2, 6.0, [])
    assert Validation.from_dict(val.to_dict()) == val
    skip = Skipped("x", "budget", 12.0)
    assert Skipped.from_dict(skip.to_dict()) == skip


def test_the_simulator_caps_its_window_of_independent_gaps_and_keeps_spiky_cycles() -> None:
    # at a tiny model's capacity bound the simulated 20 s window was millions of arrivals
    # (127 s of a 45 s budget in one goodput bisection); each simulated run now holds at most
    # SIM_MAX_REQUESTS of Poisson or gamma arrivals, and a spiky window still spans 20 s
    rate = 200_000.0
    for pattern in ("steady", "bursty"):
        sched = schedule_for(TrafficFacts(pattern=pattern, mean_rps=50, peak_rps=100), rate,
                             max_requests=SIM_MAX_REQUESTS)
        assert len(sched) <= 1.05 * SIM_MAX_REQUESTS
        assert sched.stats().mean_rate == pytest.approx(rate, rel=0.1)
    spiky = schedule_for(TrafficFacts(pattern="spiky", mean_rps=50, peak_rps=150), 20_000.0,
                         max_requests=SIM_MAX_REQUESTS)
    assert spiky.duration_s == MIN_WINDOW_S
    # without the cap (load tests, the confirmation) the window is as long as before
    assert schedule_for(TrafficFacts(pattern="steady", mean_rps=50, peak_rps=100),
                        rate).duration_s == MIN_WINDOW_S
    # and at ordinary rates the cap changes nothing
    assert schedule_for(TrafficFacts(pattern="bursty", mean_rps=50, peak_rps=100), 50.0,
                        max_requests=SIM_MAX_REQUESTS).duration_s == 40.0


def test_the_simulator_bridge_simulates_at_most_its_cap_at_a_huge_rate() -> None:
    traffic = TrafficFacts(pattern="steady", mean_rps=5, peak_rps=5)
    policy = ServePolicy(max_batch_size=16, max_wait_ms=0.0, workers=2)
    stats = make_simulator(FlatCurve(), traffic)(policy, 1_000_000.0)
    assert 0 < stats.requests <= 1.05 * SIM_MAX_REQUESTS
