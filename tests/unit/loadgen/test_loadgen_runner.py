"""Results, the open-loop runner (with fake targets) and the in-process batcher."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from infertune.config import ServePolicy
from infertune.errors import ConfigError
from infertune.loadgen.inprocess import InProcessTarget, MicroBatcher
from infertune.loadgen.result import (
    LoadResult,
    RequestRecord,
    parse_server_timing,
    summarise,
)
from infertune.loadgen.runner import RunOptions, run_load
from infertune.loadgen.schedules import ScheduleSpec, build_schedule, schedule_stats
from infertune.loadgen.targets import Reply


def test_parse_server_timing() -> None:
    header = 'queue;dur=1.2, preprocess;dur=0.5, inference;desc="fwd";dur=3.25, cache, bad;dur=x'
    assert parse_server_timing(header) == {"queue": 1.2, "preprocess": 0.5, "inference": 3.25}
    assert parse_server_timing(None) == {}


def record(i: int, intended: float, sent: float, done: float, status: str = "200",
           **timing: float) -> RequestRecord:
    return RequestRecord(i, intended, sent, done, status, dict(timing))


def test_summarise_counts_rates_and_round_trip() -> None:
    records = [
        record(0, 0.0, 0.0, 0.010, queue=2.0),
        record(1, 0.5, 0.5, 0.530, queue=4.0),
        record(2, 1.0, 1.002, 1.100, "503"),
        record(3, 1.5, 1.5, 1.6, "connection_error"),
        record(4, 1.9, 1.9, 1.95, "429"),
    ]
    stats = schedule_stats(__import__("numpy").array([r.intended_s for r in records]), 2.0)
    result = summarise("fake", records, stats)
    assert (result.sent, result.ok, result.sheds, result.errors) == (5, 2, 2, 1)
    assert result.status_counts == {"200": 2, "503": 1, "connection_error": 1, "429": 1}
    assert result.achieved_rate == pytest.approx(2.5)
    assert result.goodput_rps == pytest.approx(1.0)
    assert result.latency is not None and result.latency.count == 2
    assert result.latency.max == pytest.approx(30.0)
    assert result.histogram.count == 2
    assert result.server_timing_ms == {"queue": 3.0}
    assert result.client_lag_ms["max"] == pytest.approx(2.0)
    assert [(p.second, p.count) for p in result.timeline] == [(0, 2)]
    again = LoadResult.from_dict(result.to_dict())
    assert again.to_dict() == result.to_dict()


def test_summarise_warns_when_client_lags() -> None:
    records = [record(i, i * 0.01, i * 0.01 + 0.05, i * 0.01 + 0.06) for i in range(100)]
    stats = schedule_stats(__import__("numpy").array([r.intended_s for r in records]), 1.0)
    result = summarise("fake", records, stats)
    assert any("could not keep up" in w for w in result.warnings)
    # latency counts from the intended time: 60 ms, not the 10 ms after the late send
    assert result.latency is not None and result.latency.p50 == pytest.approx(60.0, abs=0.1)


class StallingTarget:
    """Answers at once, except request ``stall_index``, which takes ``stall_s``."""

    name = "fake"

    def __init__(self, stall_index: int, stall_s: float) -> None:
        self.stall_index, self.stall_s = stall_index, stall_s
        self.opened = self.closed = False

    async def open(self) -> None:
        self.opened = True

    async def send(self, index: int) -> Reply:
        if index == self.stall_index:
            await asyncio.sleep(self.stall_s)
        if index == 3:
            raise RuntimeError("a bug in a custom target")
        return Reply("200")

    async def close(self) -> None:
        self.closed = True


def test_runner_is_open_loop() -> None:
    schedule = build_schedule(ScheduleSpec(shape="constant", rate=50, duration_s=0.4))
    target = StallingTarget(stall_index=5, stall_s=0.3)
    progress: list[int] = []
    result = run_load(schedule, target, on_progress=lambda done, total: progress.append(done))
    assert target.opened and target.closed
    assert result.sent == 20 and progress[-1] == 20
    # one slow request; the next ones were still sent on time (open loop), so the slow one is
    # the maximum and the median stays far below it
    assert result.latency is not None and result.latency.max >= 300.0
    assert result.latency.p50 < 150.0
    assert result.status_counts == {"200": 19, "error": 1}  # the raising target: one error


class SlowTarget:
    name = "slow"

    async def open(self) -> None: ...

    async def send(self, index: int) -> Reply:
        await asyncio.sleep(0.05)
        return Reply("200")

    async def close(self) -> None: ...


def test_max_in_flight_waits_and_counts_lag() -> None:
    schedule = build_schedule(ScheduleSpec(shape="constant", rate=100, duration_s=0.1))
    result = run_load(schedule, SlowTarget(), RunOptions(max_in_flight=1))
    # 10 requests due 10 ms apart, each 50 ms, one at a time: all but the first wait for a slot
    assert result.waited_for_slot == 9
    # the tenth (due at 90 ms) cannot start before 9 x 50 ms nor finish before 500 ms
    assert result.client_lag_ms["max"] >= 359.0
    assert result.latency is not None and result.latency.max >= 409.0
    with pytest.raises(ConfigError, match="max in-flight"):
        RunOptions(max_in_flight=0)


def test_batcher_batches_rejects_and_answers_failures() -> None:
    gate, entered = threading.Event(), threading.Event()
    seen: list[int] = []

    def fn(batch: list[Any]) -> list[Any]:
        entered.set()
        gate.wait(5)
        seen.append(len(batch))
        return [x * 2 for x in batch]

    batcher = MicroBatcher(fn, ServePolicy(max_batch_size=3, max_wait_ms=1000, max_queue=4))
    batcher.start()
    futures = [batcher.submit(i) for i in range(3)]
    assert entered.wait(5)
    futures += [batcher.submit(i) for i in range(3, 8)]
    # The worker took the first full batch of 3 and is held at the gate: 4 more fit the queue
    # and the eighth is rejected at once.
    assert futures[7].result(timeout=5).status == "503"
    gate.set()
    statuses = [f.result(timeout=5).status for f in futures[:7]]
    batcher.stop()
    assert statuses == ["200"] * 7
    assert seen == [3, 3, 1] and batcher.stats.rejected == 1
    assert batcher.stats.mean_batch_size == pytest.approx(7 / 3)
    assert {b: len(v) for b, v in batcher.stats.batch_ms.items()} == {3: 2, 1: 1}

    def broken(batch: list[Any]) -> list[Any]:
        raise ValueError("model failed")

    failing = MicroBatcher(broken, ServePolicy(max_batch_size=2, max_wait_ms=0))
    failing.start()
    replies = [failing.submit(i) for i in range(2)]
    assert [f.result(timeout=5).status for f in replies] == ["500", "500"]
    failing.stop()


class DoublingAdapter:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def predict(self, raw: list[Any]) -> list[Any]:
        self.calls.append(len(raw))
        return [x * 2 for x in raw]


def test_in_process_target_runs_a_schedule() -> None:
    adapter = DoublingAdapter()
    policy = ServePolicy(max_batch_size=4, max_wait_ms=5)
    target = InProcessTarget(adapter, policy, inputs=[1, 2, 3], name="double")
    schedule = build_schedule(ScheduleSpec(shape="poisson", rate=200, duration_s=0.5, seed=1))
    result = run_load(schedule, target)
    assert result.ok == result.sent == len(schedule)
    assert adapter.calls[:4] == [1, 2, 3, 4]  # warm-up: every batch size once
    assert max(adapter.calls) <= 4
    assert sum(adapter.calls[4:]) == result.sent
    assert set(result.server_timing_ms) == {"queue", "inference"}
    assert result.utilisation is not None and 0.0 <= result.utilisation <= 1.0
    assert LoadResult.from_dict(result.to_dict()).utilisation == result.utilisation


def test_batcher_sheds_requests_past_their_deadline() -> None:
    now = [0.0]  # an injected clock: the deadline passes without waiting for real time
    gate, entered = threading.Event(), threading.Event()

    def fn(batch: list[Any]) -> list[Any]:
        entered.set()
        gate.wait(5)
        return batch

    policy = ServePolicy(max_batch_size=1, max_wait_ms=0, timeout_ms=50)
    batcher = MicroBatcher(fn, policy, clock=lambda: now[0])
    batcher.start()
    first = batcher.submit("a")
    assert entered.wait(5)
    late = [batcher.submit("b"), batcher.submit("c")]
    now[0] = 0.051  # both have now waited 51 ms > 50 ms
    gate.set()
    assert first.result(timeout=5).status == "200"
    assert [f.result(timeout=5).status for f in late] == ["504", "504"]
    batcher.stop()
    assert batcher.stats.shed == 2 and batcher.stats.items == 1
