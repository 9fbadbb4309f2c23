"""One side of an interleaved comparison, run in its own process.

Two runtimes in one process disturb each other: an onnxruntime session's spinning threads and
an eager PyTorch model's OpenMP pool take the cores from whichever side runs next, and each
evicts the other's weights from the caches. On a 2-core AVX2 EPYC the same MiniLM INT8 model
measured p50 7.6 ms beside a spinning session and 3.7 ms without one (issue 14). In production
each model runs in its own process, so a figure a user will rely on is timed that way: each
side loads its model in a child process of its own, and ``run_interleaved`` (``self_timed``)
alternates blocks between them. A child waiting for its next request is blocked on its pipe,
so it takes nothing from the side being timed.

Each call is timed inside the child, around ``predict`` alone: the pipe's round trip is the
same for both sides and belongs to neither model.

Protocol over one duplex pipe, strictly request/answer:
  parent -> child  ("predict", request) | ("stop", None)
  child -> parent  ("ready", pid) once loaded, then ("ok", seconds) | ("error", message)
"""

from __future__ import annotations

import multiprocessing
import time
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any

from infertune.libraries import quiet_libraries
from infertune.models import load

START_TIMEOUT_S = 300.0  # importing torch and loading a model on a busy 2-core machine
CALL_TIMEOUT_S = 300.0  # one request; a hung child still ends the comparison


class ArmFailed(RuntimeError):
    """The child could not load its model or failed a request (the message says which)."""


class ArmProcess:
    """A model loaded by ``load(ref)`` in a child process; calling it with a request returns
    the seconds ``predict`` took there. Use as a context manager, or ``close()`` it."""

    def __init__(self, ref: str, *, start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.ref = ref
        ctx = multiprocessing.get_context("spawn")  # no copy of the parent's threads or models
        self._conn, child_conn = ctx.Pipe(duplex=True)
        self._process = ctx.Process(target=child_main, args=(ref, child_conn), daemon=True,
                                    name=f"infertune-arm-{ref}")
        self._process.start()
        child_conn.close()
        kind, payload = self._receive(start_timeout_s, f"loading {ref}")
        if kind != "ready":
            self.close()
            raise ArmFailed(f"{ref}: the timing process could not load it: {payload}")
        self.pid = int(payload)

    def __call__(self, request: Any) -> float:
        self._conn.send(("predict", request))
        kind, payload = self._receive(CALL_TIMEOUT_S, "a request")
        if kind != "ok":
            raise ArmFailed(f"{self.ref}: the timing process failed a request: {payload}")
        return float(payload)

    def _receive(self, timeout_s: float, what: str) -> tuple[str, Any]:
        if not self._conn.poll(timeout_s):
            self.close()
            raise ArmFailed(f"{self.ref}: the timing process did not answer {what} within "
                            f"{timeout_s:.0f} s")
        try:
            message: tuple[str, Any] = self._conn.recv()
        except EOFError:
            code = self._process.exitcode
            self.close()
            raise ArmFailed(f"{self.ref}: the timing process exited (code {code}) during "
                            f"{what}") from None
        return message

    def close(self) -> None:
        if self._process.is_alive():
            try:
                self._conn.send(("stop", None))
            except (OSError, ValueError):
                pass
            self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(timeout=10)
        self._conn.close()

    def __enter__(self) -> ArmProcess:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def child_main(ref: str, conn: Connection) -> None:
    """The child: load the model, say ready, then time each request until told to stop."""
    quiet_libraries()
    try:
        adapter = load(ref)
    except Exception as exc:  # reported to the parent, which raises ArmFailed
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", multiprocessing.current_process().pid))
    while True:
        try:
            kind, payload = conn.recv()
        except EOFError:  # the parent went away
            return
        if kind == "stop":
            return
        try:
            t0 = time.perf_counter()
            adapter.predict(payload)
            conn.send(("ok", time.perf_counter() - t0))
        except Exception as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
