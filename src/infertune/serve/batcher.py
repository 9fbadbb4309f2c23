"""The dynamic batcher: forms batches from the queue and runs the model off the event loop.

A batch starts with the best queued request (``take_first``) and then collects requests whose
padding it can afford (batch_shape.py) until it holds ``max_batch_size`` inputs or ``max_wait_s``
has passed since that first request was *enqueued* — a request that already waited while the
model was busy is not made to wait again — or at once when another worker is idle (waiting
would only delay it: the next request would start on the idle worker anyway).

Up to ``workers`` batches run at once, each in a worker thread or, for models whose forward
holds the GIL, a worker process (``remote``), so the event loop keeps accepting, caching and
shedding while the model computes.

A batch that fails is counted and each of its requests is run again alone, so a model that
raises on some inputs fails only the requests holding them (InputFailed, a 4xx: the inputs
failed on their own); the rest of the batch is answered. The number of outputs is checked
against the number of inputs so a model that drops a row cannot give one caller another
caller's answer (BatchFailed, a 500).

Service time is tracked per batch as an EWMA, separately for batches at least half the
maximum size (seeded by the warm-up's full-size batches: the overload bound a default deadline
comes from), and per batch-size bucket (powers of two; ``size_estimate``), which is what the
admission estimate (``wait_estimate``) and the deadline timers use: a request behind two
queued ones waits for a batch of three, not for a full one. Judging every queued request by
the full-batch time refused 2.9% of requests at 160 req/s (batches of 1-2 texts, p99 23 ms
against a 100 ms deadline) when the warm-up had timed batches of 16 at 50+ ms.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from infertune.models.adapter import Adapter
from infertune.serve.batch_shape import BatchShape, PaddingCost
from infertune.serve.prometheus_metrics import ServeMetrics
from infertune.serve.queue import RequestQueue, WorkItem

# Batches per size bucket whose fastest is the admission floor: enough to hold the fast ones
# between two bursts, few enough that a model turned slower (a throttled host) shows within
# a second or two of traffic.
FLOOR_WINDOW = 32
# The padding rule refitted to served batches (batch_shape.py): every LIVE_REFIT_EVERY batches,
# to the last LIVE_FIT_BATCHES (a few seconds of traffic at a few hundred batches a second).
LIVE_FIT_BATCHES = 256
LIVE_REFIT_EVERY = 64


class BatchFailed(Exception):
    """The model call for a whole batch failed; every request in it gets this. ``server_fault``:
    the server failed, not the inputs (a worker process died), so the batch is not rerun
    request by request to find a bad input; its callers get a 500 and may retry."""

    def __init__(self, error_type: str, message: str, server_fault: bool = False) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.server_fault = server_fault


class InputFailed(Exception):
    """The model raised on this request's inputs when they were run alone."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


@dataclass
class BatchOutcome:
    """What one request gets back from its batch: its outputs and the stage times (s)."""

    outputs: list[Any]
    timings: dict[str, float]
    batch_size: int


def run_stages(adapter: Adapter, inputs: list[Any],
               clock: Callable[[], float]) -> tuple[list[Any], dict[str, float]]:
    """preprocess -> forward -> postprocess, timing each stage (seconds)."""
    t0 = clock()
    feeds = adapter.preprocess(inputs)
    t1 = clock()
    raw = adapter.forward(feeds)
    t2 = clock()
    outputs = adapter.postprocess(raw, feeds)
    t3 = clock()
    return list(outputs), {"preprocess": t1 - t0, "inference": t2 - t1, "postprocess": t3 - t2}


RemoteStages = Callable[[list[Any]], Awaitable[tuple[list[Any], dict[str, float]]]]
"""run_stages in another process (serve/model_processes.py): inputs -> (outputs, timings)."""


class Batcher:
    """Consumes ``queue`` until it is closed and empty; see the module docstring."""

    def __init__(self, adapter: Adapter, queue: RequestQueue, *, max_batch_size: int,
                 max_wait_s: float, workers: int, clock: Callable[[], float],
                 metrics: ServeMetrics, executor: ThreadPoolExecutor | None = None,
                 remote: RemoteStages | None = None) -> None:
        self.adapter = adapter
        self.queue = queue
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self._clock = clock
        self._metrics = metrics
        self._slots = asyncio.Semaphore(workers)
        self._executor = executor or ThreadPoolExecutor(workers, thread_name_prefix="infer")
        self._own_executor = executor is None
        self._remote = remote
        self.padding_cost: PaddingCost | None = None  # fitted to the warm-up (batch_shape.py)
        self.padding_source = "none yet"  # where padding_cost came from, for /v1/config
        # (size, padded tokens, seconds) of the last served batches of text: the live refit
        self._shapes: deque[tuple[int, int, float]] = deque(maxlen=LIVE_FIT_BATCHES)
        self._since_refit = 0
        self._running: set[asyncio.Task[None]] = set()
        self._workers = workers
        self._busy = 0  # batches running now
        # each running batch: (when it was dispatched, its expected seconds then, its inputs)
        self._since: list[tuple[float, float, int]] = []
        self._service_s = 0.0  # EWMA of dispatch-to-answer seconds per batch
        self._full_s = 0.0  # the same, over batches of at least half the maximum size
        self._by_size: dict[int, float] = {}  # the same per size bucket (size_bucket)
        self._seeded: dict[int, float] = {}  # the warm-up's median per size bucket
        # the fastest of each bucket's last FLOOR_WINDOW batches: what admission refuses on
        self._recent: dict[int, deque[float]] = {}
        self.busy_s = 0.0  # model seconds summed over batches: the workers' busy time

    def service_estimate(self) -> float:
        return self._service_s

    @property
    def padding_rule(self) -> str:
        """Which requests may share a batch now, and where that rule was measured."""
        if self.padding_cost is None:
            return ("same power-of-two length bucket (no clear per-token cost measured: "
                    f"{self.padding_source})")
        return f"{self.padding_cost.describe()} ({self.padding_source})"

    def batch_estimate(self) -> float:
        """Expected seconds for a batch under load: the larger of the full-batch and the
        all-batch estimates (0 until a batch ran or the warm-up seeded it)."""
        return max(self._full_s, self._service_s)

    def seed_estimate(self, full_batch_s: float) -> None:
        """Start the full-batch estimate from a measured warm-up batch of the maximum size."""
        if full_batch_s > 0 and self._full_s == 0:
            self._full_s = full_batch_s

    def seed_sizes(self, times: list[tuple[int, float]]) -> None:
        """Keep the warm-up's (batch size, seconds) per size bucket (the median): the estimate
        of a bucket no real batch has measured yet."""
        per_bucket: dict[int, list[float]] = {}
        for size, seconds in times:
            if seconds > 0:
                per_bucket.setdefault(self.size_bucket(size), []).append(seconds)
        for bucket, samples in per_bucket.items():
            self._seeded.setdefault(bucket, sorted(samples)[len(samples) // 2])

    def size_bucket(self, inputs: int) -> int:
        """The bucket a batch of ``inputs`` is estimated in: the next power of two, at most
        the maximum batch size."""
        return min(self.max_batch_size, 1 << max(0, math.ceil(math.log2(max(1, inputs)))))

    def size_estimate(self, inputs: int) -> float:
        """Expected seconds from dispatch to answer for a batch of ``inputs`` (at most the
        maximum): what real batches of its size bucket measured. A bucket they have not
        measured takes the smaller of two upper bounds: the warm-up's figure (interpolated
        between its buckets) and the traffic's own, i.e. the nearest larger measured bucket's,
        or the largest smaller one's scaled in proportion to the size (batch time grows less
        than in proportion). The warm-up times every length up to the model's maximum, so its
        full batches can be far slower than the traffic's: a 16-text warm-up batch at 87 ms
        against real batches of 1-2 short texts at 2-3 ms shed 4% of requests at 500 req/s
        on their deadline timers, while the answered p99 was 40 ms against 100. With nothing
        measured, the batch estimate (0 before anything ran)."""
        bucket = self.size_bucket(min(inputs, self.max_batch_size))
        if bucket in self._by_size:
            return self._by_size[bucket]
        bounds = [b for b in (_interpolated(self._seeded, bucket),
                              _scaled_up(self._by_size, bucket)) if b is not None]
        return min(bounds) if bounds else self.batch_estimate()

    def size_floor(self, inputs: int) -> float:
        """Seconds a batch of ``inputs`` takes at the fastest its size bucket measured lately
        (the last FLOOR_WINDOW real batches), else the fastest of a smaller bucket (a larger
        batch is no faster), else the warm-up's figure for a smaller bucket, else 0: a lower
        bound. Admission and the deadline timers refuse on it, so a request is refused only
        when even the measured fastest service would miss its deadline; refusing on the EWMA
        (a typical time) refused requests an admit-all replay answered in time."""
        bucket = self.size_bucket(min(max(1, inputs), self.max_batch_size))
        measured = [min(v) for b, v in self._recent.items() if b <= bucket and v]
        if bucket in self._recent and self._recent[bucket]:
            return min(self._recent[bucket])
        if measured:
            return max(measured)  # the nearest smaller bucket's floor is the tighter bound
        seeded = [t for b, t in self._seeded.items() if b <= bucket]
        return min(seeded) if seeded else 0.0

    def wait_floor(self, inputs: int) -> float:
        """A lower bound on the seconds until a request is answered with ``inputs`` queued
        ahead of and including it: wait_estimate's sum with every batch at its size floor, a
        running batch's remaining time at its floor, and no batching window (a batch closes
        early when it fills or a worker is idle)."""
        rounds = math.ceil(math.ceil(max(1, inputs) / self.max_batch_size) / self._workers)
        floor = self.size_floor(min(max(1, inputs), self.max_batch_size))
        first_free = 0.0
        if self._busy >= self._workers:
            now = self._clock()
            first_free = min((max(0.0, self.size_floor(size) - (now - start))
                              for start, _, size in self._since), default=0.0)
        return first_free + rounds * floor

    def wait_estimate(self, inputs: int) -> float:
        """Seconds until a request is answered with ``inputs`` queued ahead of and including
        it: the batches they fill (each timed at its own size), spread over the workers, plus
        what is left of the first running batch when every worker is busy, plus the batching
        window."""
        rounds = math.ceil(math.ceil(max(1, inputs) / self.max_batch_size) / self._workers)
        estimate = self.size_estimate(min(max(1, inputs), self.max_batch_size))
        first_free = 0.0
        if self._busy >= self._workers:
            # the first running batch to finish frees a worker: what is left of its estimate
            # (a batch about to finish is not counted as a whole new one)
            now = self._clock()
            first_free = min((max(0.0, expected - (now - start))
                              for start, expected, _ in self._since), default=estimate)
        return first_free + rounds * estimate + self.max_wait_s

    def can_start_now(self) -> bool:
        """A worker is free: a request queued now is in a batch within the batching window."""
        return self._busy < self._workers

    def run_in_worker(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Run ``fn`` on the model's worker threads (warm-up and the cascade's fast model)."""
        return asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def run(self) -> None:
        """The batching loop; returns once the queue is closed and drained."""
        while True:
            await self._slots.acquire()
            if not await self.queue.wait_nonempty():
                self._slots.release()
                break
            batch = await self._form()
            if not batch:
                self._slots.release()
                continue
            task = asyncio.create_task(self._execute(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)
        await self.finish()

    async def finish(self) -> None:
        """Wait for the batches already running, then release the worker threads."""
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        if self._own_executor:
            self._executor.shutdown(wait=True)

    async def _form(self) -> list[WorkItem]:
        first = self.queue.take_first()
        if first is None:
            return []
        batch = [first]
        shape = BatchShape(len(first.inputs), first.tokens, self.padding_cost)
        close_at = first.enqueued_at + self.max_wait_s
        while shape.size < self.max_batch_size:
            batch += self.queue.take_matching(self.max_batch_size - shape.size,
                                              lambda item: shape.admit(len(item.inputs),
                                                                       item.tokens))
            remaining = close_at - self._clock()
            if (shape.size >= self.max_batch_size or remaining <= 0 or self.queue.closed
                    or self._busy + 1 < self._workers):
                # another worker is idle: a request arriving now would start on it at once,
                # so holding this batch open would only add the window to its latency
                break
            await self.queue.wait_arrival(remaining)
        return batch

    async def _execute(self, batch: list[WorkItem]) -> None:
        start = self._clock()
        self._busy += 1
        inputs = [x for item in batch for x in item.inputs]
        running = (start, self.size_estimate(len(inputs)), len(inputs))
        self._since.append(running)
        for item in batch:
            item.dispatched_at = start
        self._metrics.batch_size.observe(len(inputs))
        try:
            outputs, timings = await self._run(inputs)
            # only successful batches: a batch that raised early says nothing of service time
            seconds = self._clock() - start
            self._update_estimate(seconds, len(inputs))
            self._refit_padding(len(inputs), max(item.tokens for item in batch), seconds)
            self._answer(batch, outputs, timings)
        except Exception as exc:  # noqa: BLE001 - any model failure must answer every waiter
            failure = _as_batch_failure(exc, len(inputs))
            self._metrics.errors.labels(type=f"batch_{failure.error_type}").inc()
            if failure.server_fault:
                for item in batch:
                    item.settle(error=failure)
            else:
                await self._run_alone(batch, failure)
        finally:
            self._busy -= 1
            self._since.remove(running)
            self._slots.release()

    async def _run(self, inputs: list[Any]) -> tuple[list[Any], dict[str, float]]:
        if self._remote is not None:
            outputs, timings = await self._remote(inputs)
        else:
            outputs, timings = await self.run_in_worker(run_stages, self.adapter, inputs,
                                                        self._clock)
        if len(outputs) != len(inputs):
            raise BatchFailed("OutputCountMismatch", f"the model returned {len(outputs)} "
                              f"outputs for {len(inputs)} inputs")
        return outputs, timings

    async def _run_alone(self, batch: list[WorkItem], failure: BatchFailed) -> None:
        """After a batch failed: each request again on its own, so only the requests whose
        inputs make the model raise get an error."""
        for item in batch:
            if item.future.done():
                continue  # its caller has gone (deadline abandoned)
            try:
                if len(batch) == 1:
                    raise failure
                outputs, timings = await self._run(item.inputs)
            except BatchFailed as exc:
                if exc.error_type == "OutputCountMismatch":
                    item.settle(error=exc)
                    continue
                self._input_failed(item, exc.error_type)
            except Exception as exc:  # noqa: BLE001 - this request's inputs fail on their own
                self._input_failed(item, type(exc).__name__)
            else:
                self._answer([item], outputs, timings)

    def _input_failed(self, item: WorkItem, error_type: str) -> None:
        self._metrics.errors.labels(type=f"input_{error_type}").inc()
        item.settle(error=InputFailed(error_type, f"the model raised {error_type} on this "
                                      f"request's {len(item.inputs)} input(s), run on their "
                                      "own; check or change these inputs"))

    def _answer(self, batch: list[WorkItem], outputs: list[Any],
                timings: dict[str, float]) -> None:
        offset = 0
        for item in batch:
            n = len(item.inputs)
            queued = (item.dispatched_at or item.enqueued_at) - item.enqueued_at
            item.settle(BatchOutcome(outputs[offset:offset + n], {"queue": queued, **timings},
                                     batch_size=len(outputs)))
            offset += n

    def _update_estimate(self, seconds: float, size: int) -> None:
        self.busy_s += seconds
        # An EWMA reacts within a few batches to a slower model without jumping on one outlier.
        self._service_s = _ewma(self._service_s, seconds)
        bucket = self.size_bucket(size)
        self._by_size[bucket] = _ewma(self._by_size.get(bucket, 0.0), seconds)
        self._recent.setdefault(bucket, deque(maxlen=FLOOR_WINDOW)).append(seconds)
        if 2 * size >= self.max_batch_size:
            self._full_s = _ewma(self._full_s, seconds)


    def _refit_padding(self, size: int, tokens: int, seconds: float) -> None:
        """Keep the batch's shape and time; every LIVE_REFIT_EVERY batches of text, fit the
        padding rule to the last LIVE_FIT_BATCHES (kept as it was when they show no clear
        per-token cost, e.g. all of one length)."""
        if tokens <= 0:
            return  # not text: no padding
        self._shapes.append((size, tokens, seconds))
        self._since_refit += 1
        if self._since_refit < LIVE_REFIT_EVERY:
            return
        self._since_refit = 0
        fitted = PaddingCost.fit(self._shapes)
        if fitted is not None:
            self.padding_cost = fitted
            self.padding_source = f"fitted to the last {len(self._shapes)} served batches"


def _interpolated(times: dict[int, float], bucket: int) -> float | None:
    """Seconds for ``bucket`` from other buckets' times: linear in the size between the
    buckets around it, the nearest larger one's below them all, scaled in proportion above."""
    if bucket in times:
        return times[bucket]
    below = [b for b in times if b < bucket]
    above = [b for b in times if b > bucket]
    if not below:
        return times[min(above)] if above else None
    lo = max(below)
    if not above:
        return times[lo] * bucket / lo
    hi = min(above)
    return times[lo] + (bucket - lo) / (hi - lo) * (times[hi] - times[lo])


def _scaled_up(times: dict[int, float], bucket: int) -> float | None:
    """An upper bound for ``bucket`` from measured buckets: the nearest larger one's time (a
    smaller batch is no slower), else the largest smaller one's scaled in proportion."""
    above = [b for b in times if b > bucket]
    if above:
        return times[min(above)]
    below = [b for b in times if b < bucket]
    return times[max(below)] * bucket / max(below) if below else None


def _ewma(current: float, sample: float) -> float:
    return sample if current == 0 else 0.8 * current + 0.2 * sample


def _as_batch_failure(exc: Exception, size: int) -> BatchFailed:
    if isinstance(exc, BatchFailed):
        return exc
    return BatchFailed(type(exc).__name__, f"model call failed for a batch of {size} inputs: "
                       f"{type(exc).__name__}")
