"""Load-test a model without a server: an Adapter behind a small dynamic batcher in threads.

The batcher follows the same rules as the simulator (simulate.py), so the two can be compared:

- requests wait in one FIFO queue of at most ``max_queue``; a request arriving to a full queue
  is rejected at once (status "503");
- an idle worker takes a batch as soon as ``max_batch_size`` requests are queued, or when the
  oldest queued request has waited ``max_wait_ms``, whichever comes first;
- before taking a batch, requests older than ``timeout_ms`` are shed (status "504");
- ``workers`` threads each run one batch at a time; a batch that raises answers every one of
  its requests with "500" (no waiter is left hanging).

This is deliberately small and self-contained; the serving stack (serve/) has its own batcher.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from infertune.config import ServePolicy
from infertune.loadgen.targets import Reply


@dataclass
class _Item:
    payload: Any
    arrived: float
    future: Future[Reply]


@dataclass
class BatcherStats:
    batches: int = 0
    items: int = 0
    rejected: int = 0
    shed: int = 0
    failed_batches: int = 0
    busy_s: float = 0.0  # summed over workers
    open_s: float = 0.0  # from start() to stop()
    # batch size -> each batch's service time (ms) as run here: the in-run service curve
    batch_ms: dict[int, list[float]] = field(default_factory=dict)

    @property
    def mean_batch_size(self) -> float:
        return self.items / self.batches if self.batches else 0.0


class MicroBatcher:
    """Collects submitted payloads into batches for ``fn(list) -> list`` on worker threads."""

    def __init__(self, fn: Callable[[list[Any]], Sequence[Any]], policy: ServePolicy,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.fn = fn
        self.policy = policy
        self.clock = clock
        self.stats = BatcherStats()
        self._queue: deque[_Item] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self._started = 0.0

    def utilisation(self) -> float | None:
        """Busy worker-time over workers x the time the batcher was running."""
        if self.stats.open_s <= 0:
            return None
        return self.stats.busy_s / (self.policy.workers * self.stats.open_s)

    def reset_stats(self) -> None:
        with self._cond:
            self.stats = BatcherStats()
            self._started = self.clock()

    def start(self) -> None:
        self._started = self.clock()
        self._stopping = False
        self._threads = [threading.Thread(target=self._work, name=f"infertune-batcher-{i}",
                                          daemon=True) for i in range(self.policy.workers)]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join()
        self._threads = []
        self.stats.open_s += self.clock() - self._started
        with self._cond:  # anything still queued gets an answer, not silence
            while self._queue:
                self._queue.popleft().future.set_result(Reply("503"))

    def submit(self, payload: Any) -> Future[Reply]:
        future: Future[Reply] = Future()
        with self._cond:
            if len(self._queue) >= self.policy.max_queue:
                self.stats.rejected += 1
                future.set_result(Reply("503"))
                return future
            self._queue.append(_Item(payload, self.clock(), future))
            self._cond.notify()
        return future

    def _take(self) -> list[_Item] | None:
        """Block until a batch is due (called with the condition held); None when stopping."""
        max_wait = self.policy.max_wait_ms / 1000.0
        timeout = self.policy.timeout_ms / 1000.0 if self.policy.timeout_ms else None
        while not self._stopping:
            now = self.clock()
            while timeout is not None and self._queue and now - self._queue[0].arrived > timeout:
                self.stats.shed += 1
                self._queue.popleft().future.set_result(Reply("504"))
            if not self._queue:
                self._cond.wait()
                continue
            due = self._queue[0].arrived + max_wait
            if len(self._queue) >= self.policy.max_batch_size or now >= due:
                size = min(self.policy.max_batch_size, len(self._queue))
                batch = [self._queue.popleft() for _ in range(size)]
                if self._queue:
                    self._cond.notify()  # another idle worker may take the rest
                return batch
            self._cond.wait(due - now)
        return None

    def _work(self) -> None:
        while True:
            with self._cond:
                batch = self._take()
            if batch is None:
                return
            self._run(batch)

    def _run(self, batch: list[_Item]) -> None:
        start = self.clock()
        try:
            results = self.fn([item.payload for item in batch])
            failed = len(results) != len(batch)
        except Exception:  # noqa: BLE001 - every waiter must get an answer, whatever failed
            failed = True
        end = self.clock()
        with self._cond:
            self.stats.batches += 1
            self.stats.items += len(batch)
            self.stats.failed_batches += int(failed)
            self.stats.busy_s += end - start
            self.stats.batch_ms.setdefault(len(batch), []).append((end - start) * 1000.0)
        for item in batch:
            if failed:
                item.future.set_result(Reply("500"))
            else:
                item.future.set_result(Reply("200", {"queue": (start - item.arrived) * 1000.0,
                                                      "inference": (end - start) * 1000.0}))


class InProcessTarget:
    """An Adapter (``predict(list) -> list``) behind a MicroBatcher; inputs taken round-robin."""

    shares_process = True  # the runner must not busy-wait: the workers need the GIL

    def __init__(self, adapter: Any, policy: ServePolicy, inputs: Sequence[Any],
                 name: str | None = None, warmup: bool = True) -> None:
        if len(inputs) == 0:
            raise ValueError("InProcessTarget needs at least one input")
        self.adapter = adapter
        self.policy = policy
        self.inputs = list(inputs)
        self.name = name or f"in-process:{getattr(getattr(adapter, 'info', None), 'id', 'model')}"
        self.warmup = warmup
        self.batcher = MicroBatcher(adapter.predict, policy)

    async def open(self) -> None:
        self.batcher.start()
        if self.warmup:
            # Every batch size once, through the worker threads themselves (runtimes plan per
            # shape and set up per thread), so lazy initialisation stays out of the measurement.
            sizes = list(range(1, self.policy.max_batch_size + 1)) * self.policy.workers
            for size in sizes:
                futures = [self.batcher.submit(self.inputs[i % len(self.inputs)])
                           for i in range(size)]
                for future in futures:
                    await asyncio.wrap_future(future)
            self.batcher.reset_stats()

    async def send(self, index: int) -> Reply:
        future = self.batcher.submit(self.inputs[index % len(self.inputs)])
        return await asyncio.wrap_future(future)

    async def close(self) -> None:
        self.batcher.stop()

    def utilisation(self) -> float | None:
        return self.batcher.utilisation()
