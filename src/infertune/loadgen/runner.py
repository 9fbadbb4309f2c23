"""The open-loop runner: every request is started at its scheduled time whatever happened to
the requests before it, and its latency is taken from that *intended* time. A server stall
therefore shows up in every request that should have been sent during it (no coordinated
omission), and a client that falls behind shows up as client lag, never as hidden delay.

``max_in_flight`` (optional) caps concurrent requests. A request due while the cap is reached
is *not* dropped and *not* rescheduled: it waits client-side for a free slot, is counted in
``waited_for_slot``, and its wait appears both as client lag and in its latency (still measured
from the intended time). A cap thus protects the client's sockets without hiding a slow server.

Timing: ``run_load`` runs on precise_loop's event loop, whose timers wake to the microsecond
(asyncio's default loop rounds every wait up to a whole millisecond). Even so the process wakes
late by the kernel's timer slack (50 us by default) plus the scheduler's wake-up, and by
milliseconds on a busy machine. So the runner sleeps until shortly before a send is due and yields
in a tight loop (``sleep(0)``, which still handles replies) for the rest. How early it wakes is
measured, not guessed: the margin is 1.25 x the largest overshoot among its last 64 wake-ups, at
least ``SPIN_FLOOR_S`` and at most ``spin_s`` (``spin_s=0``: never spin): little spinning on a
quiet core, up to ``spin_s`` per send on a busy one; on a loop with millisecond timers
(``run_schedule`` called inside someone else's loop) it learns to wake about a millisecond early. A
target that runs the model in this process (``shares_process = True``, e.g. InProcessTarget) is
never spun for: the spinning loop would hold the GIL that the model's worker threads need, and slow
the very thing being measured.

Garbage collection: the cyclic collector is paused while requests go out (and restored after), as
timeit does while timing: a run allocates some tens of container objects per request (tasks,
futures, timer handles, records), so the collector runs often, and one of its generation-1 passes
held the loop for up to 2 ms of CPU here at 800 req/s (shared 2-core AMD EPYC), long enough to make
the sends due meanwhile late. Reference counting still frees everything that is not a cycle
(asyncio leaves one small cycle per closed connection: 5 objects, collected once the run is over).
Not paused for a ``shares_process`` target: the model serving in this process must be measured with
its collector as it will run.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from infertune.errors import ConfigError
from infertune.loadgen.precise_loop import precise_runner
from infertune.loadgen.result import LAG_WARN_MS, LoadResult, RequestRecord, summarise
from infertune.loadgen.schedules import Schedule
from infertune.loadgen.targets import Reply, Target
from infertune.measure.collector import steady_gc

ProgressFn = Callable[[int, int], None]
SPIN_FLOOR_S = 0.0001  # below timer slack (50 us) plus a wake-up: never spin less
WAKE_WINDOW = 64  # recent wake-ups the spin margin is learned from


@dataclass
class RunOptions:
    max_in_flight: int | None = None
    # The most the runner spins before a send (see the docstring). Not more: on a busy core a
    # long spin makes the runner a CPU hog that the scheduler preempts for a whole time slice
    # (seen here: sends due inside a 2 ms spin went out 3 ms late).
    spin_s: float = 0.001
    lag_warn_ms: float = LAG_WARN_MS
    seed: int = 0  # for the bootstrap CIs of the summary

    def __post_init__(self) -> None:
        if self.max_in_flight is not None and self.max_in_flight < 1:
            raise ConfigError(f"max in-flight must be >= 1, got {self.max_in_flight}; "
                              "pass --max-in-flight 1 or more, or leave it out")
        if not self.spin_s >= 0:  # NaN too
            raise ConfigError(f"the spin before a send must be >= 0 ms, got "
                              f"{self.spin_s * 1000:g} ms; pass --spin-ms 0 (never spin), more, "
                              "or inf (never sleep)")


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
    shares = bool(getattr(target, "shares_process", False))
    waker = _Waker(clock, 0.0 if shares else options.spin_s)
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
        with _collector_paused(not shares):
            for index, intended in enumerate(offsets):
                await waker.wait_until(t0 + intended)
                tasks.append(asyncio.create_task(one(index, intended)))
            if tasks:
                # let the last request start (and stamp its send) before gather's setup, which
                # takes time in proportion to the number of requests
                await asyncio.sleep(0)
                await asyncio.gather(*tasks)
    finally:
        await target.close()
    return [r for r in records if r is not None]


@contextmanager
def _collector_paused(pause: bool) -> Iterator[None]:
    """The cyclic garbage collector off for the block when ``pause`` (see the docstring)."""
    was_enabled = gc.isenabled()
    if pause:
        gc.disable()
    try:
        yield
    finally:
        if pause and was_enabled:
            gc.enable()


class _Waker:
    """Sleeps until ``margin`` before a deadline, then yields until it; the margin follows the
    measured wake-up overshoots (see the module docstring)."""

    def __init__(self, clock: Callable[[], float], cap_s: float) -> None:
        self.clock, self.cap_s = clock, max(cap_s, 0.0)
        self.margin_s = self.cap_s  # cautious until the first wake-ups are measured
        self._overshoots: deque[float] = deque(maxlen=WAKE_WINDOW)

    async def wait_until(self, deadline: float) -> None:
        wake = deadline - self.margin_s
        if wake > self.clock():
            await asyncio.sleep(wake - self.clock())
            if self.cap_s > 0:
                self._overshoots.append(self.clock() - wake)
                self.margin_s = min(self.cap_s, max(SPIN_FLOOR_S, 1.25 * max(self._overshoots)))
        # Yield (so replies are handled) until due; a no-op when already late.
        while self.clock() < deadline:
            await asyncio.sleep(0)


def run_load(schedule: Schedule, target: Target, options: RunOptions | None = None,
             *, clock: Callable[[], float] = time.perf_counter,
             on_progress: ProgressFn | None = None,
             on_records: Callable[[list[RequestRecord]], None] | None = None) -> LoadResult:
    """Run ``schedule`` against ``target`` in a fresh event loop and summarise the records
    (``on_records`` gets them too: a percentile's interval needs each request's send time)."""
    options = options or RunOptions()
    with steady_gc():  # see measure/collector.py: what a server that froze its start sees
        with precise_runner() as loop:
            records = loop.run(run_schedule(schedule, target, options, clock=clock,
                                            on_progress=on_progress))
    if on_records is not None:
        on_records(records)
    result = summarise(target.name, records, schedule.stats(),
                       lag_warn_ms=options.lag_warn_ms, seed=options.seed)
    utilisation = getattr(target, "utilisation", None)
    if callable(utilisation):  # in-process targets know their workers' busy time
        result.utilisation = utilisation()
    return result
