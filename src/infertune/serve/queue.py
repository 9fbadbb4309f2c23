"""The bounded priority queue between the HTTP handlers and the batcher.

Rules, in the order a request meets them:

- A full queue answers at once: a new request displaces the newest queued request of a
  strictly lower priority (low is shed first), or, when none is lower, is itself refused with
  429 and a Retry-After estimate.
- A request with a deadline that the queue ahead of it already makes impossible (a lower bound
  on the wait for the inputs queued at its priority or above, plus its own batch, from the
  fastest service times measured lately) is shed at once with 503: under overload the excess
  is refused immediately instead of queueing to time out, and nothing that could still be
  answered in time is.
- Every queued request with a deadline carries its own timer (``loop.call_later``), set to fire
  when the deadline can no longer be met (deadline minus the service floor of the batch it
  would join: the inputs queued at its priority or above, its own included).
  It sheds the request with 503 even while no batch is forming, so a stalled model never turns
  queued requests into late answers.
- ``take_first`` serves the highest priority, oldest first; ``take_matching`` fills a forming
  batch with the requests the batcher's padding rule admits.

The queue only lives on one event loop; nothing here is thread-safe, and nothing needs to be.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

Priority = Literal["high", "normal", "low"]
PRIORITIES: tuple[Priority, ...] = ("high", "normal", "low")


class ShedReason(StrEnum):
    QUEUE_FULL = "queue_full"
    DISPLACED = "displaced"
    DEADLINE = "deadline"
    OVERLOAD = "overload"  # refused at admission: the queue ahead already outlasts the deadline
    SHUTTING_DOWN = "shutting_down"


def queue_bound_advice(max_queue: int, deadline_s: float | None, workers: int,
                       max_batch: int, slowest_full_batch_s: float) -> str | None:
    """Why ``max_queue`` would refuse requests its deadline admits, or None when it holds at
    least what the workers answer within the deadline on full batches of the warm-up's
    slowest (longest-input) time. A full queue answers 429 whatever the deadline says, so a
    smaller bound refuses requests that would have been answered in time
    (benchmarks/false_shed.py measured it on the demo's queue of 64).

    The slowest, because serve does not know the traffic's lengths and a warning must hold for
    any of them: below this count the bound refuses in-time requests whatever the inputs. On
    the warm-up's median (a 64-token batch) serve told the demo to raise optimize's bound of
    1054, sized from the sweep's batches of the held-out texts, to 1486-1517 (2-core AMX Xeon,
    2026-12-06)."""
    if deadline_s is None or slowest_full_batch_s <= 0:
        return None
    answered = math.ceil(workers * max_batch / slowest_full_batch_s * deadline_s)
    if max_queue >= answered:
        return None
    return (f"max_queue {max_queue} refuses requests its {deadline_s * 1000:g} ms deadline would "
            f"admit: {workers} worker(s) answer at least {answered} requests within it at the "
            f"warm-up's slowest full batch ({slowest_full_batch_s * 1000:.1f} ms, its longest "
            f"inputs); set max_queue >= {answered} (infertune optimize states a deadline-sized "
            "bound)")


class Rejected(Exception):
    """A request the queue refused or shed; the app turns it into an HTTP answer."""

    def __init__(self, reason: ShedReason, message: str, status: int,
                 retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.status = status
        self.retry_after_s = retry_after_s


@dataclass(eq=False)
class WorkItem:
    """The model-bound part of one request (its cache misses)."""

    inputs: list[Any]
    priority: Priority
    deadline: float | None  # on the app clock; None: no deadline
    tokens: int  # estimated padded length (batch_shape.approx_tokens), 0 for non-text
    enqueued_at: float
    future: asyncio.Future[Any]
    dispatched_at: float | None = None
    timer: asyncio.TimerHandle | None = field(default=None, repr=False)

    def settle(self, result: Any = None, error: BaseException | None = None) -> None:
        """Answer the waiting handler once; later answers are ignored (it may have gone)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.future.done():
            return
        if error is not None:
            self.future.set_exception(error)
        else:
            self.future.set_result(result)


class RequestQueue:
    """Bounded, three-class priority queue with per-request deadline timers.

    ``service_estimate(n)`` returns the current expected seconds from dispatch to answer for
    a batch of ``n`` inputs (Retry-After uses it). ``service_floor(n)`` (default: the
    estimate) is the fastest such batch measured lately; the deadline timers use it to shed a
    request once even that would answer it after its deadline.
    ``wait_estimate(n)`` (optional) returns a lower bound on the seconds from now until a
    request is answered when ``n`` inputs (its own included) are queued at its priority or
    above (the runtime passes the batcher's wait_floor); a request whose deadline is nearer
    than that is refused at admission. Only what would miss is refused: a refusal on a
    typical time refuses requests that a replay admitting everything answers in time.

    ``can_start_now()`` (optional) says whether a worker is free. A request that finds the
    queue empty and a worker free is never refused on the estimates: nothing is ahead of it,
    and running it is the only way to learn that the model is faster than estimated. Without
    this, an estimate seeded too high (a warm-up on a busy host) above every request's deadline
    refused all traffic for good, since no batch ever ran to bring the estimate down.
    """

    def __init__(self, max_size: int, *, clock: Callable[[], float],
                 service_estimate: Callable[[int], float],
                 on_shed: Callable[[ShedReason], None] = lambda reason: None,
                 on_depth: Callable[[int], None] = lambda depth: None,
                 wait_estimate: Callable[[int], float] | None = None,
                 can_start_now: Callable[[], bool] = lambda: False,
                 service_floor: Callable[[int], float] | None = None) -> None:
        self.max_size = max_size
        self._service_floor = service_floor or service_estimate
        self._can_start_now = can_start_now
        self._clock = clock
        self._service_estimate = service_estimate
        self._wait_estimate = wait_estimate
        self._on_shed = on_shed
        self._on_depth = on_depth
        self._classes: dict[Priority, deque[WorkItem]] = {p: deque() for p in PRIORITIES}
        self._arrived = asyncio.Event()
        self._closed = False

    def __len__(self) -> int:
        return sum(len(q) for q in self._classes.values())

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Refuse new requests; queued ones are still served (graceful drain)."""
        self._closed = True
        self._arrived.set()

    def put(self, item: WorkItem) -> None:
        """Enqueue ``item`` or raise Rejected at once (never waits)."""
        if self._closed:
            self._shed_count(ShedReason.SHUTTING_DOWN)
            raise Rejected(ShedReason.SHUTTING_DOWN, "server is shutting down; retry on another "
                           "replica", 503, retry_after_s=1.0)
        delay = self._timer_delay(item)
        if len(self) == 0 and self._can_start_now():
            delay = None  # nothing ahead: it is dispatched now; the caller's wait enforces it
        elif delay is not None and delay <= 0:
            self._shed_count(ShedReason.DEADLINE)
            raise Rejected(ShedReason.DEADLINE, _deadline_message(self._batch_service(item)), 503)
        elif item.deadline is not None and self._wait_estimate is not None:
            wait = self._wait_estimate(self.inputs_ahead(item.priority) + len(item.inputs))
            if self._clock() + wait > item.deadline:
                self._shed_count(ShedReason.OVERLOAD)
                raise Rejected(ShedReason.OVERLOAD, _overload_message(wait), 503,
                               retry_after_s=self.retry_after())
        if len(self) >= self.max_size:
            victim = self._lowest_below(item.priority)
            if victim is None:
                self._shed_count(ShedReason.QUEUE_FULL)
                raise Rejected(ShedReason.QUEUE_FULL,
                               f"queue full ({self.max_size} requests waiting); retry later",
                               429, retry_after_s=self.retry_after())
            self._remove(victim)
            self._shed_count(ShedReason.DISPLACED)
            victim.settle(error=Rejected(
                ShedReason.DISPLACED, "queue full: shed to admit a higher-priority request; "
                "retry later", 429, retry_after_s=self.retry_after()))
        self._classes[item.priority].append(item)
        if delay is not None:
            loop = asyncio.get_running_loop()
            item.timer = loop.call_later(delay, self._expire, item)
        self._arrived.set()
        self._on_depth(len(self))

    def inputs_ahead(self, priority: Priority) -> int:
        """Inputs queued that would be served before a new request of ``priority``."""
        rank = PRIORITIES.index(priority)
        return sum(len(item.inputs) for p in PRIORITIES[:rank + 1] for item in self._classes[p])

    def retry_after(self) -> float:
        """Seconds until the queue has likely drained: depth x the service estimate of a batch
        holding every queued input (an upper bound, as batches carry several requests), at
        least one second (Retry-After is whole seconds)."""
        queued = self.inputs_ahead(PRIORITIES[-1])
        return float(max(1, math.ceil(len(self) * self._service_estimate(queued))))

    async def wait_nonempty(self) -> bool:
        """Wait until a request is queued; False once closed and empty."""
        while not len(self):
            if self._closed:
                return False
            self._arrived.clear()
            await self._arrived.wait()
        return True

    async def wait_arrival(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the next put (used while a batch forms)."""
        self._arrived.clear()
        try:
            await asyncio.wait_for(self._arrived.wait(), timeout)
        except TimeoutError:
            pass

    def take_first(self) -> WorkItem | None:
        """The oldest request of the highest non-empty priority class."""
        for priority in PRIORITIES:
            if self._classes[priority]:
                return self._taken(self._classes[priority].popleft())
        return None

    def take_matching(self, capacity: int,
                      admit: Callable[[WorkItem], bool] = lambda item: True) -> list[WorkItem]:
        """Up to ``capacity`` inputs' worth of requests, by priority then age, each one that
        fits and that ``admit`` accepts (the batcher's padding rule)."""
        chosen: list[WorkItem] = []
        for priority in PRIORITIES:
            for item in list(self._classes[priority]):
                if len(item.inputs) > capacity or not admit(item):
                    continue
                self._classes[priority].remove(item)
                chosen.append(self._taken(item))
                capacity -= len(item.inputs)
                if capacity <= 0:
                    return chosen
        return chosen

    def _taken(self, item: WorkItem) -> WorkItem:
        if item.timer is not None:
            item.timer.cancel()
            item.timer = None
        self._on_depth(len(self))
        return item

    def expire(self, item: WorkItem) -> bool:
        """Shed ``item`` for its deadline now if it is still queued (its caller stops waiting
        at the deadline even when the event loop ran its timer late); False once taken."""
        if not self._remove(item):
            return False
        if item.timer is not None:
            item.timer.cancel()
            item.timer = None
        self._shed_count(ShedReason.DEADLINE)
        return True

    def _timer_delay(self, item: WorkItem) -> float | None:
        if item.deadline is None:
            return None
        return item.deadline - self._clock() - self._batch_service(item)

    def _batch_service(self, item: WorkItem) -> float:
        """A floor on the batch that will answer ``item``: the smaller of two floors, the
        batch of its own inputs alone and the batch it would join at enqueue (the inputs ahead
        and its own). A floor, not the typical time: a request is shed only once even the
        fastest measured batch it could be in would answer it late. Either alone is no lower
        bound: the queue ahead may drain into other batches and a freed worker run it in a
        smaller one; and under load, when every batch is full, the single-input bucket has no
        recent batch and its floor falls back to the warm-up's median over every length
        (session of 2026-12-04: benchmarks/false_shed.py at 0.9 of capacity refused 0.3-1.0%
        with either rule alone; this one was not measured there)."""
        return min(self._service_floor(len(item.inputs)),
                   self._service_floor(self.inputs_ahead(item.priority) + len(item.inputs)))

    def _expire(self, item: WorkItem) -> None:
        item.timer = None
        if self._remove(item):
            self._shed_count(ShedReason.DEADLINE)
            item.settle(error=Rejected(ShedReason.DEADLINE,
                                       _deadline_message(self._batch_service(item)), 503))

    def _remove(self, item: WorkItem) -> bool:
        queue = self._classes[item.priority]
        try:
            queue.remove(item)
        except ValueError:
            return False  # already taken by the batcher
        self._on_depth(len(self))
        return True

    def _lowest_below(self, priority: Priority) -> WorkItem | None:
        """The newest queued request of the lowest class strictly below ``priority``."""
        rank = PRIORITIES.index(priority)
        for lower in reversed(PRIORITIES[rank + 1:]):
            if self._classes[lower]:
                return self._classes[lower][-1]
        return None

    def _shed_count(self, reason: ShedReason) -> None:
        self._on_shed(reason)


def _deadline_message(estimate_s: float) -> str:
    return (f"shed before reaching the model: the request's deadline cannot be met (expected "
            f"service time {estimate_s * 1000:.1f} ms); raise timeout_ms or retry later")


def _overload_message(wait_s: float) -> str:
    return (f"overloaded: the queue ahead would take about {wait_s * 1000:.0f} ms, past this "
            "request's deadline; retry later or raise timeout_ms")
