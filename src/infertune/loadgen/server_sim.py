"""A discrete-event simulation of a server with a dynamic batcher, fed by arrival times and a
service-time curve; predicts latency percentiles, reject/shed rates and utilisation for a
ServePolicy without sending a request, so a search can try thousands of policies.

The server it models, a simplification of serve's runtime (serve/queue.py, serve/batcher.py),
which every real load test here runs (inprocess.py):

- one FIFO queue of at most ``max_queue`` waiting requests; an arrival to a full queue is
  rejected;
- an idle worker takes a batch when ``max_batch_size`` requests are queued or when the oldest
  has waited ``max_wait_ms``, whichever is first, or at once when another worker is idle too
  (as serve's batcher: waiting would only delay it); ``workers`` batches run at once;
- when a batch is taken, queued requests older than ``timeout_ms`` are shed first;
- with lengths given, a batch holds the oldest queued request and then, oldest first, the
  queued requests serve's padding rule lets join it (serve/batch_shape.py: the pad tokens a
  request adds must cost no more than a batch's fixed overhead, ``padding``; without a fitted
  cost, lengths within the same power-of-two bucket); the others wait for a later batch;
- a batch of b requests takes ``service.latency_ms(b, seq_len)`` where seq_len is the longest
  in the batch (padding), or None when no lengths are given.

Not modelled: priorities, and serve's refusal at admission of a request the queue ahead would
make late (it sheds at dispatch instead), nor the event loop's own time. Before the padding
rule was modelled, every batch padded its requests to the longest queued one, and on the
demo's held-out texts (4 to 232 tokens) the simulator put batching's p99 at peak at 1.6-3x
no batching's, while serve's length-aware batches measured about the same. The simulator is
the fast pre-screen; its predictions are shown beside the runtime's measurements.

``service`` is anything with ``latency_ms(batch_size, seq_len=None) -> float`` (the ServiceTime
protocol; measure.ServiceCurve fits it). It is called once per batch. A deterministic curve's
answers are cached; a service time that draws random values must set ``stochastic = True`` so
every batch gets a fresh draw (that is how service-time variance is modelled).

The event loop keeps arrivals in their sorted array and only the N worker free-times in a heap,
so a run costs a few microseconds per request (see benchmarks/simulator_vs_measured.py).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from infertune.config import ServePolicy
from infertune.loadgen.schedules import Schedule
from infertune.serial import Serial
from infertune.serve.batch_shape import BatchShape, PaddingCost


@runtime_checkable
class ServiceTime(Protocol):
    def latency_ms(self, batch_size: int, seq_len: int | None = None) -> float: ...


@dataclass(frozen=True)
class LinearServiceTime:
    """``base_ms + per_item_ms * batch_size`` (+ ``per_token_ms * batch * seq_len``)."""

    base_ms: float
    per_item_ms: float = 0.0
    per_token_ms: float = 0.0

    def latency_ms(self, batch_size: int, seq_len: int | None = None) -> float:
        tokens = batch_size * (seq_len or 0)
        return self.base_ms + self.per_item_ms * batch_size + self.per_token_ms * tokens


class EmpiricalServiceTime:
    """Draws a measured batch latency at random (seeded) from samples per batch size; sizes
    without samples scale the nearest measured size's draw linearly in the mean."""

    stochastic = True

    def __init__(self, samples_ms: dict[int, Sequence[float]], seed: int = 0) -> None:
        if not samples_ms or any(len(v) == 0 for v in samples_ms.values()):
            raise ValueError("EmpiricalServiceTime needs at least one sample per batch size")
        self.samples = {b: np.asarray(v, dtype=np.float64) for b, v in samples_ms.items()}
        self.sizes = np.array(sorted(self.samples))
        self.means = np.array([self.samples[b].mean() for b in self.sizes])
        self._rng = np.random.default_rng(seed)

    def latency_ms(self, batch_size: int, seq_len: int | None = None) -> float:
        if batch_size in self.samples:
            draws = self.samples[batch_size]
            return float(draws[self._rng.integers(draws.size)])
        nearest = int(self.sizes[np.abs(self.sizes - batch_size).argmin()])
        draws = self.samples[nearest]
        mean = float(np.interp(batch_size, self.sizes, self.means))
        if batch_size > self.sizes[-1] and self.sizes.size > 1:  # extend the last slope
            slope = (self.means[-1] - self.means[-2]) / (self.sizes[-1] - self.sizes[-2])
            mean = float(self.means[-1] + slope * (batch_size - self.sizes[-1]))
        return float(draws[self._rng.integers(draws.size)]) * mean / float(draws.mean())


@dataclass
class SimResult(Serial):
    """One simulated policy; the reject and shed rates are written beside the counts."""

    DERIVED = ("reject_rate", "shed_rate")

    policy: dict[str, Any]
    requests: int
    completed: int
    rejected: int
    shed: int
    mean_ms: float | None  # arrival -> completion
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    mean_wait_ms: float | None  # arrival -> batch start (queueing + batching delay)
    wait_p99_ms: float | None
    utilisation: float  # busy worker-time / (workers * simulated span)
    mean_batch_size: float
    span_s: float
    source: str = "simulated (discrete-event model of the batcher; service times from a curve)"

    @property
    def reject_rate(self) -> float:
        return self.rejected / self.requests if self.requests else 0.0

    @property
    def shed_rate(self) -> float:
        return self.shed / self.requests if self.requests else 0.0


def simulate(arrivals: Schedule | np.ndarray | Sequence[float], service: ServiceTime,
             policy: ServePolicy, *, seq_lens: Sequence[int] | np.ndarray | None = None,
             duration_s: float | None = None,
             outside_ms: Sequence[float] | np.ndarray | None = None,
             concurrency: Callable[[int], float] | None = None,
             padding: PaddingCost | None = None) -> SimResult:
    """Simulate ``policy`` serving requests that arrive at ``arrivals`` (seconds, sorted).
    ``outside_ms``, one value per arrival, is time a request spends outside the queue and the
    model (event loop, thread hand-offs, HTTP; see calibrate.py): added to its latency, it
    occupies no worker. ``concurrency(n)`` is the slowdown of a batch that starts while ``n``
    workers (itself included) are busy, e.g. optimize's measured Contention.factor; None: the
    service times hold however many batches run at once. ``padding``: the padding cost serve
    fits at warm-up, for its rule of which lengths share a batch (with ``seq_lens`` only;
    None: serve's rule before a fit, one power-of-two length bucket per batch)."""
    if isinstance(arrivals, Schedule):
        duration_s = arrivals.duration_s if duration_s is None else duration_s
        arrivals = arrivals.offsets_s
    arr = np.asarray(arrivals, dtype=np.float64)
    if arr.size > 1 and np.any(np.diff(arr) < 0):
        raise ValueError("arrival times must be sorted")
    if seq_lens is not None and len(seq_lens) != arr.size:
        raise ValueError(f"seq_lens has {len(seq_lens)} entries for {arr.size} arrivals")
    if outside_ms is not None and len(outside_ms) != arr.size:
        raise ValueError(f"outside_ms has {len(outside_ms)} entries for {arr.size} arrivals")
    lens = list(seq_lens) if seq_lens is not None else None
    out = _run(arr.tolist(), _service_fn(service), policy, lens, concurrency, padding)
    latencies, waits, rejected, shed, busy, batches, end, served = out
    span = max(end, duration_s or 0.0, float(arr[-1]) if arr.size else 0.0)
    lat = np.asarray(latencies) * 1000.0
    if outside_ms is not None and lat.size:
        lat = lat + np.asarray(outside_ms, dtype=np.float64)[np.asarray(served)]
    wait = np.asarray(waits) * 1000.0
    pcts = np.percentile(lat, [50, 95, 99]) if lat.size else [None] * 3
    return SimResult(
        policy=policy.model_dump(), requests=int(arr.size), completed=int(lat.size),
        rejected=rejected, shed=shed,
        mean_ms=float(lat.mean()) if lat.size else None,
        p50_ms=_f(pcts[0]), p95_ms=_f(pcts[1]), p99_ms=_f(pcts[2]),
        mean_wait_ms=float(wait.mean()) if wait.size else None,
        wait_p99_ms=float(np.percentile(wait, 99)) if wait.size else None,
        utilisation=busy / (policy.workers * span) if span > 0 else 0.0,
        mean_batch_size=lat.size / batches if batches else 0.0, span_s=span,
    )


def sweep(arrivals: Schedule | np.ndarray, service: ServiceTime,
          policies: Iterable[ServePolicy], *, seq_lens: Sequence[int] | None = None
          ) -> list[SimResult]:
    """One SimResult per policy, all fed the same arrivals (common random numbers)."""
    return [simulate(arrivals, service, p, seq_lens=seq_lens) for p in policies]


def _f(value: Any) -> float | None:
    return None if value is None else float(value)


def _service_fn(service: ServiceTime) -> Any:
    """latency in *seconds* for (batch, seq_len); cached unless the service is stochastic."""
    if getattr(service, "stochastic", False):
        return lambda b, s: service.latency_ms(b, s) / 1000.0
    cache: dict[tuple[int, int | None], float] = {}

    def cached(b: int, s: int | None) -> float:
        key = (b, s)
        value = cache.get(key)
        if value is None:
            value = cache[key] = service.latency_ms(b, s) / 1000.0
        return value

    return cached


def _run(arr: list[float], service_s: Any, policy: ServePolicy, lens: list[int] | None,
         concurrency: Callable[[int], float] | None = None, padding: PaddingCost | None = None
         ) -> tuple[list[float], list[float], int, int, float, int, float, list[int]]:
    """The event loop. Returns latencies, waits (s), rejected, shed, busy time, batches, end,
    and the index of the arrival each latency belongs to."""
    n = len(arr)
    bs, wait = policy.max_batch_size, policy.max_wait_ms / 1000.0
    timeout = policy.timeout_ms / 1000.0 if policy.timeout_ms else math.inf
    maxq = policy.max_queue
    free = [0.0] * policy.workers  # a heap of the times each worker becomes free
    queue: deque[int] = deque()
    latencies: list[float] = []
    waits: list[float] = []
    served: list[int] = []
    rejected = shed = batches = 0
    busy = now = end = 0.0
    i = 0
    while True:
        if queue:
            if len(queue) >= bs:
                ready = arr[queue[bs - 1]]
            elif len(free) > 1 and max(heapq.nsmallest(2, free)[1], now) <= arr[queue[0]]:
                ready = arr[queue[0]]  # two workers idle when it arrived: no batching window
            else:
                ready = arr[queue[0]] + wait
            td = max(ready, free[0], now)
            if i < n and arr[i] <= td:  # an arrival first: it may join or fill this batch
                now = arr[i]
                if len(queue) >= maxq:
                    rejected += 1
                else:
                    queue.append(i)
                i += 1
                continue
            if td - arr[queue[0]] > timeout:
                while queue and td - arr[queue[0]] > timeout:
                    queue.popleft()
                    shed += 1
                now = td  # shed at td; the batch (if any is left) is decided afresh
                continue
            heapq.heappop(free)
            if lens is None:
                batch = [queue.popleft() for _ in range(min(bs, len(queue)))]
                seq = None
            else:
                batch, queue = _take_matching(queue, lens, bs, padding)
                seq = max(lens[j] for j in batch)
            k = len(batch)
            s = service_s(k, seq)
            if concurrency is not None:
                # the slowdown of the workers running now, itself included: two workers share
                # the cores only while both run, so at low load a batch runs as fast as alone
                s *= concurrency(1 + sum(1 for t in free if t > td))
            done = td + s
            heapq.heappush(free, done)
            busy += s
            batches += 1
            end = done if done > end else end
            for j in batch:
                a = arr[j]
                latencies.append(done - a)
                waits.append(td - a)
                served.append(j)
            now = td
        elif i < n:
            now = arr[i]
            queue.append(i)  # the queue is empty, so never full
            i += 1
        else:
            break
    return latencies, waits, rejected, shed, busy, batches, end, served


def _take_matching(queue: deque[int], lens: list[int], size: int,
                   padding: PaddingCost | None) -> tuple[list[int], deque[int]]:
    """serve's batch formation (Batcher._form): the oldest request, then each queued one, oldest
    first, that the padding rule admits, up to ``size``; returns the batch and the requests
    left waiting, still in arrival order."""
    first = queue.popleft()
    batch = [first]
    if size == 1 or not queue:
        return batch, queue
    shape = BatchShape(1, lens[first], padding)
    left: deque[int] = deque()
    while queue and len(batch) < size:
        j = queue.popleft()
        if shape.admit(1, lens[j]):
            batch.append(j)
        else:
            left.append(j)
    if not left:
        return batch, queue  # nothing skipped: the rest of the queue stands as it was
    left.extend(queue)
    return batch, left
