"""Results, the open-loop runner (with fake targets) and the in-process target (serve's
runtime, with a fake model)."""

from __future__ import annotations

import asyncio
import gc

import pytest

from infertune.config import ServePolicy
from infertune.errors import ConfigError
from infertune.loadgen.inprocess import InProcessTarget
from infertune.loadgen.result import (
    LoadResult,
    RequestRecord,
    parse_server_timing,
    summarise,
)
from infertune.loadgen.runner import RunOptions, run_load
from infertune.loadgen.schedules import ScheduleSpec, build_schedule, schedule_stats
from infertune.loadgen.targets import Reply
from infertune.serve.testing import GatedAdapter


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


def test_in_process_target_runs_a_schedule_through_serves_runtime() -> None:
    adapter = GatedAdapter()
    policy = ServePolicy(max_batch_size=4, max_wait_ms=5, cache_size=0)
    target = InProcessTarget(adapter, policy, inputs=["a", "bb", "ccc"], name="fake")
    schedule = build_schedule(ScheduleSpec(shape="poisson", rate=200, duration_s=0.5, seed=1))
    result = run_load(schedule, target)
    assert result.ok == result.sent == len(schedule)
    # serve's warm-up ran first, at batch sizes 1 and the maximum, on its own texts
    warmup = [b for b in adapter.seen if b and b[0].startswith("warm-up")]
    assert {len(b) for b in warmup} == {1, 4}
    served = [b for b in adapter.seen if b and not b[0].startswith("warm-up")]
    assert sum(map(len, served)) == result.sent
    assert max(map(len, served)) <= 4
    assert target.mean_batch_size() == pytest.approx(result.sent / len(served))
    assert set(result.server_timing_ms) == {"queue", "preprocess", "inference", "postprocess"}
    assert result.utilisation is not None and 0.0 < result.utilisation <= 1.0
    assert LoadResult.from_dict(result.to_dict()).utilisation == result.utilisation


def test_in_process_target_answers_overload_and_failures_as_serve_does() -> None:
    adapter = GatedAdapter()
    # no deadline sheds here: the test holds the model and decides when it finishes
    policy = ServePolicy(max_batch_size=1, max_wait_ms=0, max_queue=2, timeout_ms=10_000,
                         cache_size=0)
    target = InProcessTarget(adapter, policy, inputs=["a", "bb", "ccc", "dddd", "FAIL x"])

    async def scenario() -> tuple[Reply, list[Reply], Reply]:
        await target.open()
        adapter.gate.clear()
        adapter.entered.clear()
        first = asyncio.create_task(target.send(0))
        assert await asyncio.to_thread(adapter.entered.wait, 5)
        queued = [asyncio.create_task(target.send(i)) for i in (1, 2)]
        while target.runtime.queue is not None and len(target.runtime.queue) < 2:
            await asyncio.sleep(0.001)
        refused = await target.send(3)  # the queue holds two: refused at once
        adapter.gate.set()
        replies = list(await asyncio.gather(first, *queued))
        failed = await target.send(4)  # the model raises on this input alone
        await target.close()
        return refused, replies, failed

    refused, replies, failed = asyncio.run(scenario())
    assert refused.status == "429"  # serve: queue full, retry after
    assert [r.status for r in replies] == ["200", "200", "200"]
    assert failed.status == "422"


def test_in_process_target_refuses_no_inputs() -> None:
    with pytest.raises(ValueError, match="at least one input"):
        InProcessTarget(GatedAdapter(), ServePolicy(), inputs=[])


class CollectorProbe:
    """Notes whether the cyclic garbage collector was on while each request was sent."""

    name = "probe"

    def __init__(self, shares_process: bool) -> None:
        self.shares_process = shares_process
        self.seen: list[bool] = []

    async def open(self) -> None: ...

    async def send(self, index: int) -> Reply:
        self.seen.append(gc.isenabled())
        return Reply("200")

    async def close(self) -> None: ...


def test_collector_is_paused_during_a_network_run_only() -> None:
    schedule = build_schedule(ScheduleSpec(shape="constant", rate=200, duration_s=0.05))
    network, in_process = CollectorProbe(False), CollectorProbe(True)
    assert gc.isenabled()
    run_load(schedule, network)
    run_load(schedule, in_process)
    assert network.seen == [False] * 10 and in_process.seen == [True] * 10
    assert gc.isenabled()  # restored after the run
