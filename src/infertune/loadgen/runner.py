"""The open-loop runner: every request is started at its scheduled time whatever happened to
the requests before it, and its latency is taken from that *intended* time. A server stall
therefore shows up in every request that should have been sent during it (no coordinated
omission), and a client that falls behind shows up as client lag, never as hidden delay.

``max_in_flight`` (optional) caps concurrent requests. A request due while the cap is reached
is *not* dropped and *not* rescheduled: it waits client-side for a free slot, is counted in
``waited_for_slot``, and its wait appears both as client lag and in its latency (still measured
from the intended time). A cap thus protects the client's sockets without hiding a slow server.

Timing: asyncio timers on Linux wake up to ~1 ms late (epoll has millisecond resolution), so the
runner sleeps until ``spin_s`` before a send is due, then yields in a tight loop for the rest.
That costs at most ``spin_s`` of CPU per gap and keeps client lag well under a millisecond on an
idle core; set ``spin_s=0`` to never spin. A target that runs the model in this process
(``shares_process = True``, e.g. InProcessTarget) is never spun for: the spinning loop would
hold the GIL that the model's worker threads need, and slow the very thing being measured.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from infertune.loadgen.result import LAG_WARN_MS, LoadResult, RequestRecord, summarise
from infertune.loadgen.schedules import Schedule
from infertune.loadgen.targets import Reply, Target
from infertune.measure.collector import steady_gc

ProgressFn = Callable[[int, int], None]


@dataclass
class RunOptions:
    max_in_flight: int | None = None
    spin_s: float = 0.001
    lag_warn_ms: float = LAG_WARN_MS
    seed: int = 0  # for the bootstrap CIs of the summary

    def __post_init__(self) -> None:
        from infertune.errors import ConfigError

        if self.max_in_flight is not None and self.max_in_flight < 1:
            raise ConfigError(f"max in-flight must be >= 1, got {self.max_in_flight}; "
                              "pass --max-in-flight 1 or more, or leave it out")


async def run_schedule(schedule: Schedule, target: Target, options: RunOptions | None = None,
                       *, clock: Callable[[], float] = time.perf_counter,
                       on_progress: ProgressFn | None = None) -> list[RequestRecord]:
    """Send ``schedule`` to ``target`` (opened and closed here); one record per request."""
    options = options or RunOptions()
    offsets = schedule.offsets_s.tolist()
    total = len(offsets)
    records: list[RequestRecord | None] = [None] * total
    slots = asyncio.Semaphore(options.max_in_flight) if options.max_in_flight else None
    done = 0
    spin_s = 0.0 if getattr(target, "shares_process", False) else options.spin_s
    await target.open()
    try:
        t0 = clock()

        async def one(index: int, intended: float) -> None:
            nonlocal done
            waited = False
            if slots is not None:
                waited = slots.locked()
                await slots.acquire()
            sent = clock() - t0
            try:
                reply = await target.send(index)
            except Exception:  # noqa: BLE001 - a target bug is one failed request, not a crash
                reply = Reply("error")
            finally:
                if slots is not None:
                    slots.release()
            records[index] = RequestRecord(index, intended, sent, clock() - t0, reply.status,
                                           reply.server_timing_ms, waited)
            done += 1
            if on_progress is not None:
                on_progress(done, total)

        tasks: list[asyncio.Task[None]] = []
        for index, intended in enumerate(offsets):
            await _wait_until(t0 + intended, clock, spin_s)
            tasks.append(asyncio.create_task(one(index, intended)))
        if tasks:
            await asyncio.gather(*tasks)
    finally:
        await target.close()
    return [r for r in records if r is not None]


async def _wait_until(deadline: float, clock: Callable[[], float], spin_s: float) -> None:
    remaining = deadline - clock()
    if remaining > spin_s:
        await asyncio.sleep(remaining - spin_s)
    # Yield (so replies are handled) until due; a no-op when already late.
    while clock() < deadline:
        await asyncio.sleep(0)


def run_load(schedule: Schedule, target: Target, options: RunOptions | None = None,
             *, clock: Callable[[], float] = time.perf_counter,
             on_progress: ProgressFn | None = None) -> LoadResult:
    """Run ``schedule`` against ``target`` in a fresh event loop and summarise the records."""
    options = options or RunOptions()
    with steady_gc():  # see measure/collector.py: what a server that froze its start sees
        records = asyncio.run(run_schedule(schedule, target, options, clock=clock,
                                           on_progress=on_progress))
    result = summarise(target.name, records, schedule.stats(),
                       lag_warn_ms=options.lag_warn_ms, seed=options.seed)
    utilisation = getattr(target, "utilisation", None)
    if callable(utilisation):  # in-process targets know their workers' busy time
        result.utilisation = utilisation()
    return result
