"""An asyncio event loop whose timers wake up on time, for the open-loop load generator.

asyncio's default loop on Linux waits in ``epoll_wait``, whose timeout is whole milliseconds:
the selector rounds every wait *up* to the next millisecond, so a timer due in 0.3 ms fires
after 1 ms and a send scheduled between two ticks goes out up to 1 ms late, before the
scheduler's own wake-up latency is even added. That alone breaks a client-lag p99 under 1 ms
on an idle client.

``PreciseEpollSelector`` keeps epoll for the file descriptors (it scales to thousands of
sockets) but waits with a timeout on the epoll descriptor itself through ``select()``, whose
timeout has microsecond resolution (the kernel then adds its timer slack, 50 us by default).
When the epoll set becomes ready it fetches the events with a zero-timeout ``epoll_wait``. That
is one extra system call per timed wait and none for the waits asyncio makes without a timeout
(nothing scheduled) or with a zero one (work ready), which go straight to epoll.

It also hands asyncio at most ``MAX_EVENTS`` ready sockets per wait (asyncio's own selector
takes every ready socket at once). asyncio runs all the callbacks of one wait before it looks at
its timers again, so when hundreds of streams deliver a token together, a send that falls due
would wait behind all their reads; capped, it waits behind at most ``MAX_EVENTS`` of them.
epoll is level-triggered here, so the sockets left out are reported by
the next wait, and epoll rotates its ready list, so none is starved.

    with precise_runner() as runner:
        records = runner.run(run_schedule(...))

On systems without epoll (macOS, Windows) ``precise_runner`` gives asyncio's default loop, and
``is_precise`` says so, so the runner can spin for longer before a due send.
"""

from __future__ import annotations

import asyncio
import select
import selectors

_EPOLL = getattr(selectors, "EpollSelector", None)
MAX_EVENTS = 16  # ready sockets handled per loop iteration (see the module docstring)


if _EPOLL is not None:

    class PreciseEpollSelector(_EPOLL):  # type: ignore[valid-type,misc]
        """EpollSelector with microsecond-resolution timed waits (see the module docstring)."""

        def select(self, timeout: float | None = None) -> list[
                tuple[selectors.SelectorKey, int]]:
            # selectors.EpollSelector.select, with the timed wait done by select() and at most
            # MAX_EVENTS events taken; _selector (the epoll object) and _fd_to_key are the
            # base class's, unchanged since Python 3.4.
            wait = -1.0 if timeout is None else 0.0
            if timeout is not None and timeout > 0:
                ready_fds, _, _ = select.select([self.fileno()], [], [], timeout)
                if not ready_fds:
                    return []
            try:
                fd_events = self._selector.poll(wait, MAX_EVENTS)
            except InterruptedError:
                return []
            ready = []
            for fd, event in fd_events:
                key = self._fd_to_key.get(fd)
                if key is None:
                    continue
                mask = (selectors.EVENT_WRITE if event & ~select.EPOLLIN else 0) | \
                    (selectors.EVENT_READ if event & ~select.EPOLLOUT else 0)
                ready.append((key, mask & key.events))
            return ready


def new_precise_loop() -> asyncio.AbstractEventLoop:
    """A selector event loop with precise timers where epoll exists, else the default loop."""
    if _EPOLL is None:
        return asyncio.new_event_loop()
    return asyncio.SelectorEventLoop(PreciseEpollSelector())


def precise_runner() -> asyncio.Runner:
    """An ``asyncio.Runner`` (use it as a context manager) over ``new_precise_loop()``."""
    return asyncio.Runner(loop_factory=new_precise_loop)


def is_precise(loop: asyncio.AbstractEventLoop) -> bool:
    """True when ``loop`` waits with sub-millisecond timers (built by ``new_precise_loop``)."""
    return _EPOLL is not None and isinstance(getattr(loop, "_selector", None),
                                             PreciseEpollSelector)
