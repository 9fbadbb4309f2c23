"""RequestQueue and Batcher on an event loop, with fake adapters; no HTTP."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from infertune.serve.batcher import Batcher, BatchOutcome, InputFailed
from infertune.serve.prometheus_metrics import ServeMetrics
from infertune.serve.queue import Rejected, RequestQueue, ShedReason, WorkItem, queue_bound_advice
from infertune.serve.testing import GatedAdapter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _item(text: str, priority: str = "normal", deadline: float | None = None,
          clock: Clock | None = None, tokens: int = 0) -> WorkItem:
    return WorkItem([text], priority, deadline, tokens, enqueued_at=clock() if clock else 0.0,
                    future=asyncio.get_running_loop().create_future())


def test_priority_order_and_displacement() -> None:
    async def scenario() -> None:
        shed: list[ShedReason] = []
        queue = RequestQueue(3, clock=Clock(), service_estimate=lambda n: 0.5,
                             on_shed=shed.append)
        low_a, low_b, normal = _item("la", "low"), _item("lb", "low"), _item("n")
        for item in (low_a, low_b, normal):
            queue.put(item)
        with pytest.raises(Rejected) as refused:
            queue.put(_item("lc", "low"))
        assert (refused.value.status, refused.value.reason) == (429, ShedReason.QUEUE_FULL)
        assert refused.value.retry_after_s == 2.0  # ceil(3 queued x 0.5 s)
        high = _item("h", "high")
        queue.put(high)  # displaces the newest low
        assert low_b.future.done() and isinstance(low_b.future.exception(), Rejected)
        assert [queue.take_first() for _ in range(3)] == [high, normal, low_a]
        assert queue.take_first() is None
        assert shed == [ShedReason.QUEUE_FULL, ShedReason.DISPLACED]

    asyncio.run(scenario())


def test_deadline_timer_sheds_while_queued_and_hopeless_requests_are_refused() -> None:
    async def scenario() -> None:
        clock = Clock()
        queue = RequestQueue(10, clock=clock, service_estimate=lambda n: 0.010)
        with pytest.raises(Rejected) as hopeless:  # 5 ms left, 10 ms of service expected
            queue.put(_item("a", deadline=clock() + 0.005, clock=clock))
        assert hopeless.value.status == 503
        timed = _item("b", deadline=clock() + 0.030, clock=clock)
        queue.put(timed)
        with pytest.raises(Rejected, match="deadline cannot be met"):
            await asyncio.wait_for(timed.future, 5)  # its own timer fires, no batch needed
        assert len(queue) == 0
        kept = _item("c", deadline=clock() + 60, clock=clock)
        queue.put(kept)
        assert queue.take_first() is kept and kept.timer is None  # taken: timer cancelled

    asyncio.run(scenario())


def test_take_matching_takes_what_the_rule_admits_within_capacity() -> None:
    async def scenario() -> None:
        queue = RequestQueue(10, clock=Clock(), service_estimate=lambda n: 0.0)
        items = [_item(f"t{i}", tokens=i % 2) for i in range(6)]
        for item in items:
            queue.put(item)
        assert queue.take_matching(2, lambda item: item.tokens == 1) == [items[1], items[3]]
        assert queue.take_matching(10) == [items[0], items[2], items[4], items[5]]

    asyncio.run(scenario())


def test_batcher_reruns_a_failed_batch_alone_so_only_the_bad_request_fails() -> None:
    async def scenario() -> None:
        adapter = GatedAdapter()
        metrics = ServeMetrics()
        queue = RequestQueue(16, clock=Clock(), service_estimate=lambda n: 0.0)
        batcher = Batcher(adapter, queue, max_batch_size=3, max_wait_s=0.0, workers=1,
                          clock=Clock(), metrics=metrics)
        items = [_item(t) for t in ("a", "b", "FAIL", "c", "d")]
        for item in items:
            queue.put(item)
        queue.close()
        await asyncio.wait_for(batcher.run(), 10)
        # the failed batch is rerun one request at a time: only FAIL's request fails
        assert adapter.seen == [["a", "b", "FAIL"], ["a"], ["b"], ["FAIL"], ["c", "d"]]
        assert [item.future.result().outputs[0].shape for item in items[:2]] == [(3,), (3,)]
        failed = items[2].future.exception()
        assert isinstance(failed, InputFailed) and failed.error_type == "RuntimeError"
        for item in items[3:]:
            outcome = item.future.result()
            assert isinstance(outcome, BatchOutcome) and outcome.batch_size == 2
            assert set(outcome.timings) == {"queue", "preprocess", "inference", "postprocess"}
        assert metrics.registry.get_sample_value("infertune_batch_size_count") == 2
        assert metrics.registry.get_sample_value("infertune_batch_size_sum") == 5
        errors = metrics.registry.get_sample_value
        assert errors("infertune_errors_total", {"type": "batch_RuntimeError"}) == 1
        assert errors("infertune_errors_total", {"type": "input_RuntimeError"}) == 1

    asyncio.run(scenario())


def test_closed_queue_refuses_with_503() -> None:
    async def scenario() -> None:
        queue = RequestQueue(4, clock=Clock(), service_estimate=lambda n: 0.0)
        queue.close()
        with pytest.raises(Rejected) as refused:
            queue.put(_item("late"))
        assert (refused.value.status, refused.value.reason) == (503, ShedReason.SHUTTING_DOWN)
        assert await queue.wait_nonempty() is False

    asyncio.run(scenario())


def test_a_queue_bound_below_what_the_deadline_admits_is_named_with_the_fix() -> None:
    # 2 workers x 16 inputs in 20 ms: 1,600 req/s, so 480 answered within a 300 ms deadline
    advice = queue_bound_advice(64, 0.3, 2, 16, 0.020)
    assert advice == ("max_queue 64 refuses requests its 300 ms deadline would admit: 2 "
                      "worker(s) answer at least 480 requests within it at the warm-up's "
                      "slowest full batch (20.0 ms, its longest inputs); set max_queue >= 480 "
                      "(infertune optimize states a deadline-sized bound)")
    assert queue_bound_advice(480, 0.3, 2, 16, 0.020) is None
    assert queue_bound_advice(64, None, 2, 16, 0.020) is None  # no deadline: nothing to admit
    assert queue_bound_advice(64, 0.3, 2, 16, 0.0) is None  # no measured batch yet


def test_serve_warns_at_warm_up_when_its_queue_bound_would_refuse_in_time_requests(
        caplog: pytest.LogCaptureFixture) -> None:
    from infertune.config import ServePolicy
    from infertune.serve.runtime import ServeRuntime

    async def start(policy: ServePolicy) -> list[str]:
        caplog.clear()
        runtime = ServeRuntime(GatedAdapter(), policy, clock=time.monotonic, metrics=ServeMetrics())
        await runtime.start()
        while not runtime.ready and runtime.warmup_error is None:
            await asyncio.sleep(0.01)
        await runtime.stop()
        return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]

    small = ServePolicy(max_batch_size=4, max_wait_ms=0, max_queue=2, timeout_ms=60_000,
                        cache_size=0)
    with caplog.at_level("INFO", logger="infertune"):
        warned = asyncio.run(start(small))
        assert any(m.startswith("max_queue 2 refuses requests its 60000 ms deadline")
                   for m in warned)
        roomy = small.model_copy(update={"max_queue": 10**9})
        assert not any("max_queue" in m for m in asyncio.run(start(roomy)))


class _LengthTimedAdapter(GatedAdapter):
    """The fake, reading texts up to 256 words, with a forward that takes 1 ms per 8 words:
    the warm-up's full batches take 2, 8 and 32 ms at its 16-, 64- and 256-word buckets."""

    def __init__(self) -> None:
        super().__init__()
        self.info = dataclasses.replace(self.info, max_length=256)

    def forward(self, inputs):
        words = max(len(t.split()) for t in self._texts.get(id(inputs["codes"]), [""]))
        time.sleep(words / 8 / 1000)
        return super().forward(inputs)


def test_serve_sizes_its_queue_advice_on_the_warm_up_s_slowest_batch(
        caplog: pytest.LogCaptureFixture) -> None:
    """The demo's chosen bound (1054, from the sweep's batch times of its held-out texts) drew
    a warning to raise it to 1486-1517, from the warm-up's median (64-token) batch. Here: 1
    worker x 4 inputs within 1 s is 500 at the median 8 ms batch and 125 at the slowest 32 ms
    one; a bound of 200 is no warning, one of 100 is."""
    from infertune.config import ServePolicy
    from infertune.serve.runtime import ServeRuntime

    async def warnings(max_queue: int) -> list[str]:
        caplog.clear()
        policy = ServePolicy(max_batch_size=4, max_wait_ms=0, max_queue=max_queue,
                             timeout_ms=1000, cache_size=0, workers=1)
        runtime = ServeRuntime(_LengthTimedAdapter(), policy, clock=time.monotonic,
                               metrics=ServeMetrics())
        await runtime.start()
        while not runtime.ready and runtime.warmup_error is None:
            await asyncio.sleep(0.01)
        await runtime.stop()
        return [r.getMessage() for r in caplog.records
                if r.levelname == "WARNING" and "max_queue" in r.getMessage()]

    with caplog.at_level("INFO", logger="infertune"):
        assert asyncio.run(warnings(200)) == []
        assert any(m.startswith("max_queue 100 refuses") for m in asyncio.run(warnings(100)))
