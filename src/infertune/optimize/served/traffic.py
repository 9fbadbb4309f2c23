"""The bridge between the policy sweep and the load generator: the scenario's traffic shape as
arrival schedules, the simulator fed with a measured service curve, the measured slowdown when
several workers share the cores, and the real open-loop load test that validates a policy.

Traffic shapes (the scenario's ``traffic.pattern``; the mapping is a stated assumption the
report repeats):
    steady -> Poisson arrivals (squared CV of gaps 1)
    bursty -> gamma gaps with burstiness 0.25 (squared CV 4)
    spiky  -> on-off: the mean rate in gaps, bursts at peak/mean times that rate, 2 s bursts
              every ~10 s
    trace  -> the trace file's own gaps, rescaled to the rate asked for
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infertune.config import ServePolicy, TrafficFacts
from infertune.loadgen.inprocess import InProcessTarget
from infertune.loadgen.result import RequestRecord, is_ok
from infertune.loadgen.runner import run_load
from infertune.loadgen.schedules import Schedule, ScheduleSpec, build_schedule, read_trace
from infertune.loadgen.server_sim import simulate
from infertune.measure.tail_interval import CONFIDENCE, TailInterval, tail_interval
from infertune.models.adapter import Adapter
from infertune.optimize.served.policy_sweep import SimStats, SimulateFn
from infertune.serial import Serial
from infertune.serve.batch_shape import PaddingCost

BURSTY_B = 0.25


def traffic_assumption(traffic: TrafficFacts) -> str:
    pattern = traffic.pattern or "steady"
    return {
        "steady": "steady traffic modelled as Poisson arrivals",
        "bursty": f"bursty traffic modelled as gamma inter-arrival gaps with burstiness "
                  f"{BURSTY_B} (squared CV {1 / BURSTY_B:g})",
        "spiky": "spiky traffic modelled as on-off Poisson bursts (2 s bursts every ~10 s at "
                 "peak/mean times the base rate)",
        "trace": f"the trace {traffic.trace} replayed, rescaled to each rate",
    }[pattern]


# The simulator costs about 14 us of Python per request: at a tiny model's capacity bound
# (hundreds of thousands of req/s) a 20 s window is millions of requests, and the goodput
# bisection of a 6,000-parameter MLP's policies spent 127 s of a 45 s --budget there (the
# serving-policy stage of tests/integration/test_optimize_onnx_tensor.py). A simulated p99
# needs a few thousand answers: past SIM_MAX_REQUESTS the simulated window is shortened, except
# for spiky traffic, whose window must hold its on/off cycles (2 s bursts every ~10 s) at any
# rate.
SIM_MAX_REQUESTS = 20_000
MIN_WINDOW_S = 20.0


def window_s(traffic: TrafficFacts, rate: float, *, min_requests: int = 2000,
             max_duration_s: float = 600.0, max_requests: int | None = None) -> float:
    """schedule_for's window at ``rate`` (a trace keeps its own length whatever this says)."""
    duration = min(max(min_requests / rate, MIN_WINDOW_S), max_duration_s)
    if max_requests is not None and (traffic.pattern or "steady") != "spiky":
        # Poisson and gamma gaps are independent draws: a shorter window loses no burst
        # structure
        duration = min(duration, max(max_requests, min_requests) / rate)
    return duration


def sim_arrivals(traffic: TrafficFacts, rate: float) -> float:
    """About how many arrivals the simulator's schedule at ``rate`` holds (before drawing it)."""
    if traffic.pattern == "trace" and traffic.trace is not None:
        return float(len(read_trace(traffic.trace)))
    return rate * window_s(traffic, rate, max_requests=SIM_MAX_REQUESTS)


def schedule_for(traffic: TrafficFacts, rate: float, *, seed: int = 0,
                 min_requests: int = 2000, max_duration_s: float = 600.0,
                 duration_s: float | None = None,
                 max_requests: int | None = None) -> Schedule:
    """Arrivals at mean ``rate`` with the scenario's shape, long enough for a stable p99 (at
    least ``min_requests`` and MIN_WINDOW_S); with ``max_requests`` (the simulator's), a
    window of independent gaps (Poisson, gamma) holds no more than that many arrivals."""
    pattern = traffic.pattern or "steady"
    duration = duration_s or window_s(traffic, rate, min_requests=min_requests,
                                      max_duration_s=max_duration_s, max_requests=max_requests)
    if pattern == "bursty":
        spec = ScheduleSpec("gamma", rate=rate, duration_s=duration, seed=seed,
                            burstiness=BURSTY_B)
    elif pattern == "spiky":
        ratio = (traffic.peak_rps / traffic.mean_rps
                 if traffic.peak_rps and traffic.mean_rps else 3.0)
        # time-average rate = (8 base + 2 * ratio * base) / 10 = rate  ->  solve for base
        base = rate * 10.0 / (8.0 + 2.0 * max(ratio, 1.0))
        spec = ScheduleSpec("onoff", rate=base, peak_rate=base * max(ratio, 1.0),
                            duration_s=duration, seed=seed, burst_s=2.0, gap_s=8.0)
    elif pattern == "trace" and traffic.trace is not None:
        offsets = read_trace(traffic.trace)
        native = len(offsets) / max(float(offsets[-1]), 1e-9) if len(offsets) > 1 else rate
        spec = ScheduleSpec("trace", rate=rate, duration_s=None, seed=seed,
                            trace=traffic.trace, trace_scale=rate / native)
    else:
        spec = ScheduleSpec("poisson", rate=rate, duration_s=duration, seed=seed)
    return build_schedule(spec)


MIN_BLOCK_S = 1.0  # a queue's answers stay correlated for about this long at ms service times


def burst_block_s(spec: ScheduleSpec) -> float:
    """The time block a percentile's interval resamples (measure/tail_interval.py): how long
    the arrivals' swings last. An on-off schedule swings over one burst and one gap; a renewal
    schedule's (Poisson, gamma) short gaps cluster over about squared-CV / rate seconds; at
    least MIN_BLOCK_S, over which the queue itself carries a burst's backlog forward."""
    if spec.shape == "onoff":
        return max(MIN_BLOCK_S, spec.burst_s + spec.gap_s)
    scv = 1.0 / spec.burstiness if spec.shape == "gamma" else 1.0
    return max(MIN_BLOCK_S, scv / spec.rate)


@dataclass
class Contention(Serial):
    """Measured slowdown of one forward call when ``workers`` calls run at once on this
    machine's cores (1.0 for one worker)."""

    factors: dict[int, float]  # workers -> slowdown
    batch_size: int
    samples: int

    def factor(self, workers: int) -> float:
        if workers in self.factors:
            return self.factors[workers]
        known = sorted(self.factors)
        return self.factors[max(k for k in known if k <= workers)] * workers / max(
            k for k in known if k <= workers)


def measure_contention(call: Callable[[], Any], workers: Sequence[int], *, calls: int = 20,
                       clock: Callable[[], float] = time.perf_counter,
                       call_for: Callable[[int], Callable[[], Any]] | None = None
                       ) -> Contention:
    """Median call time with w threads calling at once, over the median with one thread.
    ``call_for(w)``: the call as w workers make it when serve sizes the model's threads for
    them (serve/worker_threads.py); default ``call`` for every w."""
    def median_with(w: int) -> float:
        times: list[list[float]] = [[] for _ in range(w)]
        each = call if w == 1 or call_for is None else call_for(w)
        each()  # warm (a session sized for w workers is new)

        def loop(slot: int) -> None:
            for _ in range(calls):
                t0 = clock()
                each()
                times[slot].append(clock() - t0)

        threads = [threading.Thread(target=loop, args=(i,)) for i in range(w)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return float(np.median(np.concatenate([np.asarray(t) for t in times])))

    call()  # warm
    single = median_with(1)
    factors = {1: 1.0}
    for w in sorted(set(workers) - {1}):
        factors[w] = max(1.0, median_with(w) / single)
    return Contention(factors, batch_size=1, samples=calls)


def make_simulator(curve: Any, traffic: TrafficFacts, *, contention: Contention | None = None,
                   seq_lens: Sequence[int] | None = None, seed: int = 0,
                   overhead_ms: float = 0.0) -> SimulateFn:
    """A SimulateFn over ``loadgen.simulate``: arrivals with the scenario's shape at each rate,
    per-request sequence lengths drawn (seeded) from the data, service from ``curve``.
    ``overhead_ms`` (measured tokenise + postprocess time per request) is added per batch item
    since the curve times ``forward`` only."""
    schedules: dict[float, Schedule] = {}
    rng = np.random.default_rng(seed)
    lens = np.asarray(seq_lens) if seq_lens is not None and len(seq_lens) else None
    padding = curve_padding_cost(curve) if lens is not None else None

    class _WithOverhead:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def latency_ms(self, batch_size: int, seq_len: int | None = None) -> float:
            return self.inner.latency_ms(batch_size, seq_len) + overhead_ms * batch_size

    def run(policy: ServePolicy, rate: float) -> SimStats:
        key = round(rate, 6)
        if key not in schedules:
            schedules[key] = schedule_for(traffic, rate, seed=seed,
                                          max_requests=SIM_MAX_REQUESTS)
        sched = schedules[key]
        per_req = (rng.choice(lens, size=len(sched)) if lens is not None else None)
        res = simulate(sched, _WithOverhead(curve), policy, seq_lens=per_req,
                       concurrency=contention.factor if contention else None, padding=padding)
        return sim_stats(res, rate)

    return run


def curve_padding_cost(curve: Any) -> PaddingCost | None:
    """serve's padding rule fitted to the service curve's points (batch size x length) as
    serve fits it to its warm-up batches (their two shortest lengths), so the simulator forms
    the batches serve starts with; None when the curve has one length (serve then batches by
    length bucket)."""
    return PaddingCost.from_warmup([(p.batch_size, p.seq_len, p.p50_ms / 1000.0)
                                    for p in curve.points if p.seq_len is not None])


def sim_stats(res: Any, rate: float) -> SimStats:
    """SimStats from a loadgen SimResult; nothing completed means an unbounded latency."""
    inf = float("inf")
    return SimStats(rate=rate, p50_ms=res.p50_ms if res.p50_ms is not None else inf,
                    p95_ms=res.p95_ms if res.p95_ms is not None else inf,
                    p99_ms=res.p99_ms if res.p99_ms is not None else inf,
                    shed=(res.rejected + res.shed) / res.requests if res.requests else 0.0,
                    utilisation=res.utilisation, mean_batch=res.mean_batch_size,
                    requests=res.requests)


@dataclass
class Validation(Serial):
    """A real open-loop in-process load test of one policy at one rate."""

    stats: SimStats
    achieved_rate: float
    client_lag_p99_ms: float | None
    seconds: float
    warnings: list[str]
    # "p95" -> the percentile's 95% interval (measure/tail_interval.py); empty in a run before
    # session 9, whose verdicts are then "not shown"
    intervals: dict[str, TailInterval] = field(default_factory=dict)


INTERVAL_KEYS = ("p50", "p95", "p99")


def record_intervals(segments: Sequence[tuple[Sequence[RequestRecord], float]], *,
                     block_s: float, seed: int = 0,
                     confidence: float = CONFIDENCE) -> dict[str, TailInterval]:
    """p50/p95/p99 intervals at ``confidence`` of the answered requests of ``segments``
    ((records, the segment's scheduled length) in the order run; each later segment's send
    times are offset past the earlier ones, so a block never spans two segments). Empty when
    nothing was answered."""
    lat: list[float] = []
    starts: list[float] = []
    offset = 0.0
    for records, length in segments:
        ok = [r for r in records if is_ok(r.status)]
        lat += [r.latency_ms for r in ok]
        starts += [offset + r.intended_s for r in ok]
        offset += math.ceil(max(length, max((r.intended_s for r in records), default=0.0))
                            / block_s + 1) * block_s
    if not lat:
        return {}
    return {k: tail_interval(lat, starts, int(k[1:]) / 100, block_s=block_s, seed=seed,
                             confidence=confidence)
            for k in INTERVAL_KEYS}


def validate_policy(adapter: Adapter, policy: ServePolicy, traffic: TrafficFacts, rate: float,
                    inputs: Sequence[Any], *, duration_s: float, seed: int = 0) -> Validation:
    """Send the scenario's traffic shape at ``rate`` for ``duration_s`` to ``adapter`` served by
    serve's own runtime under ``policy``, latency from the intended send time. The response
    cache is off: the held-out inputs are replayed round-robin, so a cache would answer the
    repeats from memory and the figure would not be the model's (the cache's effect is
    estimated on its own from the data's repeat rate)."""
    sched = schedule_for(traffic, rate, seed=seed, duration_s=duration_s)
    rng = np.random.default_rng(seed)
    order = [inputs[i] for i in rng.permutation(len(inputs))]
    target = InProcessTarget(adapter, policy.model_copy(update={"cache_size": 0}), order)
    started = time.perf_counter()
    kept: list[RequestRecord] = []
    result = run_load(sched, target, on_records=kept.extend)
    lat = result.latency
    inf = float("inf")
    sent = max(result.sent, 1)
    stats = SimStats(rate=rate, p50_ms=lat.p50 if lat else inf, p95_ms=lat.p95 if lat else inf,
                     p99_ms=lat.p99 if lat else inf,
                     shed=(result.sheds + result.errors) / sent,
                     mean_batch=target.mean_batch_size(), requests=result.sent)
    return Validation(stats, result.achieved_rate, result.client_lag_ms.get("p99"),
                      time.perf_counter() - started, list(result.warnings),
                      record_intervals([(kept, sched.duration_s)],
                                       block_s=burst_block_s(sched.spec), seed=seed))
