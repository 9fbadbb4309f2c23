"""The dynamic batcher: forms batches from the queue and runs the model off the event loop.

A batch starts with the best queued request (``take_first``) and then collects requests of
the same length bucket until it holds ``max_batch_size`` inputs or ``max_wait_s`` has passed
since that first request was *enqueued* — a request that already waited while the model was
busy is not made to wait again. Up to ``workers`` batches run at once, each in a worker thread,
so the event loop keeps accepting, caching and shedding while the model computes.

A batch that fails answers every request in it with BatchFailed (and counts it); other
batches never see the failure. The number of outputs is checked against the number of inputs
so a model that drops a row cannot give one caller another caller's answer.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from infertune.models.base import Adapter
from infertune.serve.metrics import ServeMetrics
from infertune.serve.queue import RequestQueue, WorkItem


class BatchFailed(Exception):
    """The model call for a whole batch failed; every request in it gets this."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


@dataclass
class BatchOutcome:
    """What one request gets back from its batch: its outputs and the stage times (s)."""

    outputs: list[Any]
    timings: dict[str, float]
    batch_size: int


def text_bucket(texts: Sequence[Any]) -> int:
    """Length bucket of a request's texts: log2 of the longest, in ~4-character tokens, so
    requests whose padded lengths are within 2x of each other share a batch."""
    longest = max((len(t) for t in texts if isinstance(t, str)), default=0)
    return max(0, math.ceil(math.log2(max(1, longest // 4))))


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


class Batcher:
    """Consumes ``queue`` until it is closed and empty; see the module docstring."""

    def __init__(self, adapter: Adapter, queue: RequestQueue, *, max_batch_size: int,
                 max_wait_s: float, workers: int, clock: Callable[[], float],
                 metrics: ServeMetrics, executor: ThreadPoolExecutor | None = None) -> None:
        self.adapter = adapter
        self.queue = queue
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self._clock = clock
        self._metrics = metrics
        self._slots = asyncio.Semaphore(workers)
        self._executor = executor or ThreadPoolExecutor(workers, thread_name_prefix="infer")
        self._own_executor = executor is None
        self._running: set[asyncio.Task[None]] = set()
        self._service_s = 0.0  # EWMA of dispatch-to-answer seconds per batch

    def service_estimate(self) -> float:
        return self._service_s

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
        size = len(first.inputs)
        bucket = first.bucket
        close_at = first.enqueued_at + self.max_wait_s
        while size < self.max_batch_size:
            more = self.queue.take_matching(self.max_batch_size - size, bucket)
            batch.extend(more)
            size += sum(len(item.inputs) for item in more)
            remaining = close_at - self._clock()
            if size >= self.max_batch_size or remaining <= 0 or self.queue.closed:
                break
            await self.queue.wait_arrival(remaining)
        return batch

    async def _execute(self, batch: list[WorkItem]) -> None:
        start = self._clock()
        for item in batch:
            item.dispatched_at = start
        inputs = [x for item in batch for x in item.inputs]
        self._metrics.batch_size.observe(len(inputs))
        try:
            outputs, timings = await self.run_in_worker(run_stages, self.adapter, inputs,
                                                        self._clock)
            if len(outputs) != len(inputs):
                raise BatchFailed("OutputCountMismatch", f"the model returned {len(outputs)} "
                                  f"outputs for {len(inputs)} inputs")
        except Exception as exc:  # noqa: BLE001 - any model failure must answer every waiter
            failure = exc if isinstance(exc, BatchFailed) else BatchFailed(
                type(exc).__name__, f"model call failed for a batch of {len(inputs)} inputs: "
                f"{type(exc).__name__}")
            self._metrics.errors.labels(type=f"batch_{failure.error_type}").inc()
            for item in batch:
                item.settle(error=failure)
            return
        finally:
            self._slots.release()
            self._update_estimate(self._clock() - start)
        self._answer(batch, outputs, timings)

    def _answer(self, batch: list[WorkItem], outputs: list[Any],
                timings: dict[str, float]) -> None:
        offset = 0
        for item in batch:
            n = len(item.inputs)
            queued = (item.dispatched_at or item.enqueued_at) - item.enqueued_at
            item.settle(BatchOutcome(outputs[offset:offset + n], {"queue": queued, **timings},
                                     batch_size=len(outputs)))
            offset += n

    def _update_estimate(self, seconds: float) -> None:
        # An EWMA reacts within a few batches to a slower model without jumping on one outlier.
        self._service_s = seconds if self._service_s == 0 else 0.8 * self._service_s + 0.2 * seconds
