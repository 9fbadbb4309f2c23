"""Overload protection by default: the admission estimate, refusal at once, and the default
deadline a runtime derives from its measured service time."""

from __future__ import annotations

import asyncio
import time
from collections import deque

import pytest

from infertune.config import ServePolicy
from infertune.serve.batcher import Batcher
from infertune.serve.prometheus_metrics import ServeMetrics
from infertune.serve.queue import Rejected, RequestQueue, ShedReason, WorkItem
from infertune.serve.request_validation import PredictRequest
from infertune.serve.runtime import ServeRuntime
from infertune.serve.testing import GatedAdapter
from infertune.serve.warmup import full_batch_seconds


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _item(priority="normal", deadline=None, n=1) -> WorkItem:
    return WorkItem(inputs=["x"] * n, priority=priority, deadline=deadline, tokens=0,
                    enqueued_at=100.0, future=asyncio.get_running_loop().create_future())


def test_wait_estimate_counts_batches_workers_and_the_running_batch() -> None:
    async def scenario() -> None:
        queue = RequestQueue(8, clock=Clock(), service_estimate=lambda n: 0.0)
        batcher = Batcher(GatedAdapter(), queue, max_batch_size=4, max_wait_s=0.005,
                          workers=2, clock=Clock(), metrics=ServeMetrics())
        assert batcher.wait_estimate(3) == 0.005  # nothing measured yet
        batcher.seed_estimate(0.100)
        batcher.seed_estimate(0.900)  # only the first seed counts
        assert batcher.batch_estimate() == 0.100
        assert batcher.wait_estimate(4) == pytest.approx(0.105)  # one batch, a free worker
        assert batcher.wait_estimate(9) == pytest.approx(0.205)  # 3 batches over 2 workers
        batcher._busy = 2  # both workers busy: one more batch time
        assert batcher.wait_estimate(9) == pytest.approx(0.305)

    asyncio.run(scenario())


def test_the_wait_is_timed_by_the_batches_the_queue_holds_not_by_full_ones() -> None:
    """Seen at 160 req/s with max batch 16: warm-up batches of 16 took 50+ ms, traffic formed
    batches of 1-2, and judging each queued request by a full batch refused 2.9% of them
    while the answered p99 was 23 ms against a 100 ms deadline."""
    async def scenario() -> None:
        clock = Clock()
        queue = RequestQueue(64, clock=clock, service_estimate=lambda n: 0.0)
        batcher = Batcher(GatedAdapter(), queue, max_batch_size=16, max_wait_s=0.002,
                          workers=2, clock=clock, metrics=ServeMetrics())
        batcher.seed_estimate(0.060)
        batcher.seed_sizes([(1, 0.004), (16, 0.070), (1, 0.006), (16, 0.060), (1, 0.005)])
        assert batcher.size_estimate(1) == 0.005  # the median warm-up batch of 1
        assert batcher.size_estimate(16) == 0.070  # the median of the two batches of 16
        # bucket 4 (3 inputs) lies between the measured 1 and 16: linear in the size
        assert batcher.size_estimate(3) == pytest.approx(0.005 + (4 - 1) / 15 * 0.065)
        assert batcher.size_estimate(40) == 0.070  # at most one full batch
        # both workers busy, one dispatched 1 ms ago as a batch of 1: a request behind two
        # queued ones waits for what is left of it, then a batch of 3 (bucket 4), + the window
        batcher._busy = 2
        batcher._since = [(clock.now - 0.001, 0.005, 1), (clock.now - 0.002, 0.070, 16)]
        assert batcher.wait_estimate(3) == pytest.approx(0.004 + 0.018 + 0.002)
        # what real batches measure replaces the warm-up's figure for their bucket
        for _ in range(30):
            batcher._update_estimate(0.002, 1)
        assert batcher.size_estimate(1) == pytest.approx(0.002, rel=0.01)
        batcher.seed_sizes([(1, 0.050)])  # a late seed never overrides a measured bucket
        assert batcher.size_estimate(1) == pytest.approx(0.002, rel=0.01)
        assert batcher.batch_estimate() == pytest.approx(0.060)  # the overload bound's figure
        # buckets no real batch reached: the smaller of the warm-up's figure and the traffic's
        # own bound (1-text batches at 2 ms: 16 texts take at most 16 x 2 ms) -- seen at 500
        # req/s, where warm-up batches of 16 long texts (87 ms) put the deadline timers of
        # 4% of requests 87 ms early while real batches of 1-2 short texts took 2-3 ms
        assert batcher.size_estimate(16) == pytest.approx(16 * 0.002, rel=0.01)
        assert batcher.size_estimate(3) == pytest.approx(4 * 0.002, rel=0.01)
        for _ in range(30):
            batcher._update_estimate(0.010, 8)
        assert batcher.size_estimate(3) == pytest.approx(0.010, rel=0.01)  # bucket 8 above it
        slow = Batcher(GatedAdapter(), queue, max_batch_size=16, max_wait_s=0.0, workers=1,
                       clock=clock, metrics=ServeMetrics())
        slow.seed_sizes([(16, 0.020)])
        for _ in range(30):
            slow._update_estimate(0.004, 1)
        assert slow.size_estimate(16) == 0.020  # the warm-up's figure when it is the smaller

    asyncio.run(scenario())


def test_a_queued_request_is_timed_out_by_the_smallest_batch_that_holds_it() -> None:
    async def scenario() -> None:
        clock = Clock()
        sizes: list[int] = []
        queue = RequestQueue(64, clock=clock,
                             service_estimate=lambda n: sizes.append(n) or 0.010 * n)
        early = _item(deadline=100.1, n=2)
        queue.put(early)
        assert early.timer is not None and sizes[-2:] == [2, 2]
        later = _item(deadline=100.1, n=3)
        queue.put(later)  # 2 inputs ahead of its 3: it may still run in a batch of its own
        assert sizes[-2:] == [3, 5]  # its own batch and the one it would join
        # its timer fires when the deadline minus the smaller floor, a batch of its own 3
        # inputs, is reached (the batch it would join at enqueue, 5 inputs, is no floor)
        left = later.timer.when() - asyncio.get_running_loop().time()
        assert left == pytest.approx(0.1 - 0.03, abs=0.005)
        early.timer.cancel()
        later.timer.cancel()

    asyncio.run(scenario())


def test_a_single_input_floor_from_the_warm_up_does_not_shed_a_request_early() -> None:
    # under load every batch is full: the single-input bucket has no recent batch and its
    # floor is the warm-up's median over every length (50 ms here), no floor of what will run
    async def scenario() -> None:
        clock = Clock()
        queue = RequestQueue(64, clock=clock,
                             service_estimate=lambda n: 0.050 if n == 1 else 0.010)
        ahead = [_item(deadline=100.3, n=1) for _ in range(3)]
        for item in ahead:
            queue.put(item)
        last = _item(deadline=100.1, n=1)
        queue.put(last)  # 3 ahead: it joins a batch of 4, whose floor is 10 ms
        left = last.timer.when() - asyncio.get_running_loop().time()
        assert left == pytest.approx(0.1 - 0.010, abs=0.005)
        for item in [*ahead, last]:
            item.timer.cancel()

    asyncio.run(scenario())


def test_a_request_the_queue_would_make_late_is_refused_at_once_with_503() -> None:
    async def scenario() -> None:
        clock = Clock()
        shed: list[ShedReason] = []
        queue = RequestQueue(64, clock=clock, service_estimate=lambda n: 0.1,
                             on_shed=shed.append, wait_estimate=lambda n: 0.1 * n)
        queue.put(_item(deadline=100.35, n=2))  # 0.2 s ahead of a 0.35 s deadline: admitted
        with pytest.raises(Rejected) as refused:
            queue.put(_item(deadline=100.35, n=2))  # 4 inputs -> 0.4 s > 0.35 s
        assert (refused.value.status, refused.value.reason) == (503, ShedReason.OVERLOAD)
        assert "overloaded" in str(refused.value) and refused.value.retry_after_s >= 1
        queue.put(_item(priority="high", deadline=100.35, n=3))  # high skips the normal ones
        queue.put(_item(deadline=None, n=5))  # no deadline: never refused for time
        assert shed == [ShedReason.OVERLOAD] and len(queue) == 3
        assert queue.inputs_ahead("normal") == 10 and queue.inputs_ahead("high") == 3

    asyncio.run(scenario())


def test_default_deadline_comes_from_the_measured_service_time() -> None:
    async def scenario() -> None:
        runtime = ServeRuntime(GatedAdapter(), ServePolicy(max_wait_ms=5, max_batch_size=4),
                               clock=Clock(), metrics=ServeMetrics())
        assert runtime.default_deadline_s() is None  # not started
        await runtime.start()
        assert runtime.batcher is not None
        runtime.batcher._full_s = 0.100
        assert runtime.default_deadline_s() == pytest.approx(0.305)
        assert runtime.answer_bound_s() == pytest.approx(0.405)  # + one batch time of grace
        runtime.batcher._full_s = 0.001
        runtime.batcher._service_s = 0.001
        assert runtime.default_deadline_s() == 0.050  # the floor
        fixed = ServeRuntime(GatedAdapter(), ServePolicy(timeout_ms=80), clock=Clock(),
                             metrics=ServeMetrics())
        assert fixed.default_deadline_s() == pytest.approx(0.080)
        await runtime.stop()

    asyncio.run(scenario())


def test_warmup_seed_is_the_median_full_size_batch() -> None:
    times = [(1, 0.01), (4, 0.30), (1, 0.01), (4, 0.10), (4, 0.12)]
    assert full_batch_seconds(times, 4) == 0.12
    assert full_batch_seconds([(1, 0.01)], 4) == 0.0


def test_expire_sheds_a_request_still_queued_and_leaves_a_taken_one() -> None:
    async def scenario() -> None:
        shed: list[ShedReason] = []
        queue = RequestQueue(8, clock=Clock(), service_estimate=lambda n: 0.0,
                             on_shed=shed.append)
        waiting, taken = _item(deadline=200.0), _item(deadline=200.0)
        queue.put(taken)
        queue.put(waiting)
        assert queue.take_first() is taken and waiting.timer is not None
        assert queue.expire(waiting) is True and waiting.timer is None and len(queue) == 0
        assert queue.expire(taken) is False and queue.expire(waiting) is False
        assert shed == [ShedReason.DEADLINE]

    asyncio.run(scenario())


def test_an_idle_server_admits_a_request_whatever_its_stale_estimate_says() -> None:
    """A warm-up on a busy host once seeded 105 ms against a 30 ms deadline: every request was
    refused, no batch ran, and the estimate never came down. With nothing ahead and a worker
    free the request runs, and the measured batches bring the estimate down."""

    async def scenario() -> None:
        runtime = ServeRuntime(GatedAdapter(), ServePolicy(max_wait_ms=0, max_batch_size=1,
                                                           timeout_ms=30, warmup=False,
                                                           cache_size=0),
                               clock=time.monotonic, metrics=ServeMetrics())
        await runtime.start()
        assert runtime.batcher is not None and runtime.queue is not None
        runtime.batcher.seed_estimate(0.105)
        for i in range(12):
            result = await runtime.predict(PredictRequest(inputs=[f"text {i}"]),
                                           time.monotonic())
            assert len(result.outputs) == 1
        assert runtime.batcher.batch_estimate() < 0.030  # learned from the batches it ran
        # busy: the estimates decide again (a request behind a running batch is refused)
        runtime.batcher._busy = 1
        runtime.batcher._full_s = runtime.batcher._service_s = 0.105
        runtime.batcher._by_size = {1: 0.105}
        runtime.batcher._recent = {1: deque([0.105])}  # the fastest lately: 105 ms
        with pytest.raises(Rejected) as refused:
            runtime.queue.put(_item(deadline=time.monotonic() + 0.030))
        assert refused.value.status == 503
        runtime.batcher._busy = 0
        await runtime.stop()

    asyncio.run(scenario())


def test_a_running_batch_counts_only_what_is_left_of_its_estimate() -> None:
    async def scenario() -> None:
        clock = Clock()
        queue = RequestQueue(8, clock=clock, service_estimate=lambda n: 0.0)
        batcher = Batcher(GatedAdapter(), queue, max_batch_size=1, max_wait_s=0.0,
                          workers=1, clock=clock, metrics=ServeMetrics())
        batcher.seed_estimate(0.010)
        assert batcher.wait_estimate(1) == pytest.approx(0.010)  # a worker is free
        batcher._busy, batcher._since = 1, [(clock.now - 0.004, 0.010, 1)]  # dispatched 4 ms ago
        assert batcher.wait_estimate(1) == pytest.approx(0.016)  # 6 ms left + its own 10
        clock.now += 0.050  # running past its estimate: expected to free the worker now
        assert batcher.wait_estimate(2) == pytest.approx(0.020)

    asyncio.run(scenario())
