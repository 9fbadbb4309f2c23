"""The batching simulator: exact traces of small cases worked by hand, and agreement with
queueing theory where theory is exact (M/M/1, M/D/1: mean wait and p99 of response time)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq

from infertune.config import ServePolicy
from infertune.loadgen.schedules import ScheduleSpec, build_schedule
from infertune.loadgen.server_sim import (
    EmpiricalServiceTime,
    LinearServiceTime,
    ServiceTime,
    SimResult,
    simulate,
    sweep,
)
from infertune.measure.curve import CurvePoint, ServiceCurve
from infertune.serve.batch_shape import PaddingCost

FIFO = ServePolicy(max_batch_size=1, max_wait_ms=0, workers=1, max_queue=10**9)


class ExponentialService:
    """Independent exponential service times (the 'M' in M/M/1), drawn in advance."""

    stochastic = True

    def __init__(self, mean_ms: float, count: int, seed: int) -> None:
        self.draws = np.random.default_rng(seed).exponential(mean_ms, count).tolist()
        self.i = -1

    def latency_ms(self, batch_size: int, seq_len: int | None = None) -> float:
        self.i += 1
        return self.draws[self.i]


def md1_wait_cdf(t: float, rho: float) -> float:
    """P(W <= t) for M/D/1 with D = 1 (Erlang's formula)."""
    total = 0.0
    for k in range(int(math.floor(t)) + 1):
        x = rho * (k - t)
        total += x**k / math.factorial(k) * math.exp(-x)
    return (1 - rho) * total


# Poisson arrivals, 10 ms service (mu = 100/s). The counts keep the asymptotic standard error
# of the mean wait under ~1% (M/M/1 at rho 0.8: sqrt(rho(2+5rho-4rho^2+rho^3)/(1-rho)^4 / n)
# / mu over Wq = 4/mu is 0.9% at n = 1.5M), so 5% is about five standard errors.
CASES = [(0.5, 300_000), (0.8, 1_500_000)]


@pytest.mark.parametrize("rho,n", CASES)
def test_mm1_matches_theory(rho: float, n: int) -> None:
    mu, lam = 100.0, rho * 100.0
    arrivals = build_schedule(ScheduleSpec(shape="poisson", rate=lam, duration_s=n / lam, seed=11))
    result = simulate(arrivals, ExponentialService(10.0, len(arrivals) + 10, seed=12), FIFO)
    mean_wait = rho / (mu - lam) * 1000  # Wq of M/M/1, ms
    p99 = math.log(100) / (mu - lam) * 1000  # response time ~ Exp(mu - lambda)
    assert result.mean_wait_ms == pytest.approx(mean_wait, rel=0.05)
    assert result.p99_ms == pytest.approx(p99, rel=0.05)
    assert result.utilisation == pytest.approx(rho, rel=0.02)
    assert result.mean_batch_size == 1.0 and result.rejected == 0 and result.shed == 0


@pytest.mark.parametrize("rho,n", CASES)
def test_md1_matches_theory(rho: float, n: int) -> None:
    lam = rho * 100.0
    arrivals = build_schedule(ScheduleSpec(shape="poisson", rate=lam, duration_s=n / lam, seed=21))
    result = simulate(arrivals, LinearServiceTime(base_ms=10.0), FIFO)
    mean_wait = rho / (2 * 100.0 * (1 - rho)) * 1000  # Pollaczek-Khinchine, ms
    wait_p99 = brentq(lambda t: md1_wait_cdf(t, rho) - 0.99, 0.0, 25.0) * 10.0
    assert result.mean_wait_ms == pytest.approx(mean_wait, rel=0.05)
    assert result.p99_ms == pytest.approx(wait_p99 + 10.0, rel=0.05)


def test_batch_fills_before_wait_expires() -> None:
    policy = ServePolicy(max_batch_size=2, max_wait_ms=5, workers=1, max_queue=10)
    r = simulate(np.array([0.0, 0.001, 0.002]), LinearServiceTime(base_ms=10.0), policy,
                 duration_s=0.1)
    # [0, 1 ms] fill a batch at 1 ms, done at 11 ms: latencies 11 and 10 ms. The third waits for
    # the worker (free at 11 ms; its own 5 ms wait expired at 7 ms): runs 11 -> 21 ms = 19 ms.
    assert r.completed == 3 and r.mean_batch_size == 1.5
    assert r.mean_ms == pytest.approx((11 + 10 + 19) / 3)
    assert r.mean_wait_ms == pytest.approx((1 + 0 + 9) / 3)
    assert r.utilisation == pytest.approx(0.02 / 0.1)


def test_wait_expiry_dispatches_partial_batch() -> None:
    policy = ServePolicy(max_batch_size=8, max_wait_ms=4, workers=1)
    r = simulate([0.0, 0.001], LinearServiceTime(base_ms=2.0, per_item_ms=1.0), policy)
    # dispatched at 4 ms (oldest waited 4 ms) with 2 items: 2 + 2*1 = 4 ms -> done at 8 ms
    assert r.mean_batch_size == 2.0
    assert r.p50_ms == pytest.approx(7.5)  # latencies 8 and 7 ms


def test_two_workers_run_in_parallel() -> None:
    policy = ServePolicy(max_batch_size=1, max_wait_ms=0, workers=2)
    r = simulate([0.0, 0.0, 0.0], LinearServiceTime(base_ms=10.0), policy)
    assert sorted([r.p50_ms, r.mean_ms]) == pytest.approx([10.0, 40 / 3])  # 10, 10, 20


def test_workers_slow_each_other_only_while_both_run() -> None:
    # contention measured as 1.5x for two workers at once: a batch pays it when it starts
    # beside a running one, never when it runs alone
    policy = ServePolicy(max_batch_size=1, max_wait_ms=0, workers=2)
    factor = {1: 1.0, 2: 1.5}.__getitem__
    apart = simulate([0.0, 1.0], LinearServiceTime(base_ms=10.0), policy, concurrency=factor)
    assert apart.p50_ms == pytest.approx(10.0) and apart.mean_ms == pytest.approx(10.0)
    # the second starts at 5 ms while the first runs (until 10 ms): 15 ms of service
    together = simulate([0.0, 0.005], LinearServiceTime(base_ms=10.0), policy,
                        concurrency=factor)
    assert together.mean_ms == pytest.approx((10.0 + 15.0) / 2)
    # without a concurrency model the service times hold
    plain = simulate([0.0, 0.005], LinearServiceTime(base_ms=10.0), policy)
    assert plain.mean_ms == pytest.approx(10.0)


def test_no_batching_window_while_another_worker_is_idle() -> None:
    # as serve's batcher: with a second worker idle, waiting 50 ms could only delay the request
    policy = ServePolicy(max_batch_size=8, max_wait_ms=50, workers=2)
    r = simulate([0.0, 0.005], LinearServiceTime(base_ms=10.0), policy)
    # the first starts at once on one worker; the second arrives with only one worker idle,
    # so it keeps the window: dispatched at 55 ms, done at 65 ms
    assert sorted([r.p50_ms, r.mean_ms]) == pytest.approx([35.0, 35.0])
    assert r.mean_wait_ms == pytest.approx(25.0)


def test_bounded_queue_rejects_and_deadline_sheds() -> None:
    full = ServePolicy(max_batch_size=1, max_wait_ms=0, workers=1, max_queue=2)
    r = simulate([0.0, 0.001, 0.002, 0.003, 0.004], LinearServiceTime(base_ms=100.0), full)
    # 0 goes straight to service; 1 and 2 wait; 3 and 4 find the queue full
    assert (r.completed, r.rejected, r.shed) == (3, 2, 0)
    assert r.reject_rate == pytest.approx(0.4)
    deadline = ServePolicy(max_batch_size=1, max_wait_ms=0, workers=1, timeout_ms=150)
    r = simulate([0.0, 0.001, 0.002], LinearServiceTime(base_ms=100.0), deadline)
    # 1 starts at 100 ms (waited 99 <= 150); 2 would start at 200 ms (waited 198): shed
    assert (r.completed, r.shed) == (2, 1)
    assert r.shed_rate == pytest.approx(1 / 3)


def test_seq_lens_use_longest_in_batch() -> None:
    policy = ServePolicy(max_batch_size=2, max_wait_ms=50, workers=1)
    service = LinearServiceTime(base_ms=0.0, per_token_ms=0.1)
    r = simulate([0.0, 0.0], service, policy, seq_lens=[70, 100])  # one length bucket
    assert r.p50_ms == pytest.approx(2 * 100 * 0.1)  # padded to 100 tokens
    assert r.mean_batch_size == 2
    with pytest.raises(ValueError, match="seq_lens has 1"):
        simulate([0.0, 0.0], service, policy, seq_lens=[10])


def test_lengths_share_a_batch_as_serve_lets_them() -> None:
    """serve's padding rule (batch_shape.py): without a fitted cost, one power-of-two length
    bucket per batch; with one, a request joins when its pad tokens cost no more than a
    batch's fixed overhead. The others wait, in arrival order, for a later batch."""
    policy = ServePolicy(max_batch_size=4, max_wait_ms=50, workers=1)
    service = LinearServiceTime(base_ms=1.0, per_token_ms=0.1)
    # 10 and 12 tokens share the shortest bucket; 100 waits for the next batch
    r = simulate([0.0, 0.0, 0.0], service, policy, seq_lens=[10, 100, 12])
    assert r.mean_batch_size == pytest.approx(1.5)  # 3 requests in 2 batches
    first = 0.050 * 1000 + 1.0 + 2 * 12 * 0.1  # the window, then 2 x 12 tokens
    assert r.p50_ms == pytest.approx(first) and r.p99_ms > first + 1.0 + 100 * 0.1 - 0.5
    # a fixed overhead that dwarfs the pad tokens: all three in one batch, padded to 100
    dear = PaddingCost(fixed_s=1.0, per_token_s=1e-6)
    merged = simulate([0.0, 0.0, 0.0], service, policy, seq_lens=[10, 100, 12], padding=dear)
    assert merged.mean_batch_size == 3
    assert merged.p50_ms == pytest.approx(50 + 1.0 + 3 * 100 * 0.1)
    # a per-token cost that dwarfs the overhead: 10 and 12 (2 pad tokens) still merge only
    # if 2 pad tokens cost no more than the overhead
    cheap = PaddingCost(fixed_s=0.0001, per_token_s=0.001)
    assert simulate([0.0, 0.0, 0.0], service, policy, seq_lens=[10, 100, 12],
                    padding=cheap).mean_batch_size == 1


def point(batch: int, p50_ms: float) -> CurvePoint:
    return CurvePoint(batch_size=batch, seq_len=None, p50_ms=p50_ms, p95_ms=p50_ms,
                      mean_ms=p50_ms, samples=10, throughput_per_s=batch / p50_ms * 1000)


def test_service_curve_satisfies_protocol_and_sweep() -> None:
    curve = ServiceCurve(points=[point(1, 4.0), point(8, 11.0)])
    assert isinstance(curve, ServiceTime)
    arrivals = build_schedule(ScheduleSpec(shape="poisson", rate=150, duration_s=20, seed=1))
    policies = [ServePolicy(max_batch_size=1, max_wait_ms=0),
                ServePolicy(max_batch_size=8, max_wait_ms=2)]
    unbatched, batched = sweep(arrivals, curve, policies)
    # 150/s x 4 ms = 0.6 load unbatched; batching cuts the work per request, so utilisation
    # and the tail both drop.
    assert unbatched.utilisation == pytest.approx(0.6, rel=0.05)
    assert batched.utilisation < unbatched.utilisation
    assert batched.p99_ms < unbatched.p99_ms


def test_empirical_service_time_draws_and_scales() -> None:
    service = EmpiricalServiceTime({1: [1.0, 3.0], 4: [4.0]}, seed=0)
    draws = {service.latency_ms(1) for _ in range(50)}
    assert draws == {1.0, 3.0}
    assert service.latency_ms(4) == 4.0
    # means 2 (b=1) and 4 (b=4): slope 2/3 per item, so b=8 -> 4 + 4 * 2/3
    assert service.latency_ms(8) == pytest.approx(4 + 8 / 3)


def test_sim_result_round_trip() -> None:
    r = simulate([0.0, 0.01], LinearServiceTime(base_ms=1.0), FIFO)
    again = SimResult.from_dict(r.to_dict())
    assert again == r and r.to_dict()["reject_rate"] == 0.0
