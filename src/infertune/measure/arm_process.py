"""One side of an interleaved comparison, run in its own process.

Two runtimes in one process disturb each other: an onnxruntime session's spinning threads and
an eager PyTorch model's OpenMP pool take the cores from whichever side runs next, and each
evicts the other's weights from the caches. On a 2-core AVX2 EPYC, MiniLM INT8 without
spinning measured p50 3.9 ms alone and 4.5-5.4 ms right after a spinning variant had run in
the same process (README, "The optimizer holds one variant in memory at a time"). In production
each model runs in its own process, so a figure a user will rely on is timed that way: each
side loads its model in a child process of its own, and ``run_interleaved`` (``self_timed``)
alternates blocks between them. A child waiting for its next request is blocked on its pipe,
so it takes nothing from the side being timed.

Each call is timed inside the child, around ``predict`` alone: the pipe's round trip is the
same for both sides and belongs to neither model.

The child is ``python -m infertune.measure.arm_process REF``, not a multiprocessing spawn: a
spawn runs the parent's main script again in the child, which breaks (or repeats the side
effects of) a user's script that calls the optimizer without a ``__main__`` guard.

Protocol: pickled messages (multiprocessing.connection framing) on the child's stdin and on
its original stdout (the child points fd 1 at stderr, so a library's print cannot corrupt a
message), strictly request/answer:
  parent -> child  ("predict", request) | ("stop", None)
  child -> parent  ("ready", pid) once loaded, then ("ok", seconds) | ("error", message)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
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
        self._stderr = tempfile.TemporaryFile()  # its last lines explain a crash
        self._process = subprocess.Popen(
            [sys.executable, "-m", "infertune.measure.arm_process", ref],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        assert self._process.stdin is not None and self._process.stdout is not None
        self._to_child = Connection(os.dup(self._process.stdin.fileno()), readable=False)
        self._from_child = Connection(os.dup(self._process.stdout.fileno()), writable=False)
        self._process.stdin.close()
        self._process.stdout.close()
        kind, payload = self._receive(start_timeout_s, f"loading {ref}")
        if kind != "ready":
            self.close()
            raise ArmFailed(f"{ref}: the timing process could not load it: {payload}")
        self.pid = int(payload)

    def __call__(self, request: Any) -> float:
        self._to_child.send(("predict", request))
        kind, payload = self._receive(CALL_TIMEOUT_S, "a request")
        if kind != "ok":
            raise ArmFailed(f"{self.ref}: the timing process failed a request: {payload}")
        return float(payload)

    def _receive(self, timeout_s: float, what: str) -> tuple[str, Any]:
        if not self._from_child.poll(timeout_s):
            self.close()
            raise ArmFailed(f"{self.ref}: the timing process did not answer {what} within "
                            f"{timeout_s:.0f} s")
        try:
            message: tuple[str, Any] = self._from_child.recv()
        except EOFError:
            code = self._process.wait(timeout=10)
            self._stderr.seek(0)
            tail = self._stderr.read().decode(errors="replace").strip().splitlines()[-1:]
            self.close()
            raise ArmFailed(f"{self.ref}: the timing process exited (code {code}) during "
                            f"{what}" + (f": {tail[0]}" if tail else "")) from None
        return message

    def close(self) -> None:
        if self._process.poll() is None:
            try:
                self._to_child.send(("stop", None))
            except (OSError, ValueError):
                pass
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
        for conn in (self._to_child, self._from_child):
            conn.close()
        self._stderr.close()

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def __enter__(self) -> ArmProcess:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def child_main(ref: str, requests: Connection, answers: Connection) -> None:
    """The child: load the model, say ready, then time each request until told to stop."""
    quiet_libraries()
    try:
        adapter = load(ref)
    except Exception as exc:  # reported to the parent, which raises ArmFailed
        answers.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    answers.send(("ready", os.getpid()))
    while True:
        try:
            kind, payload = requests.recv()
        except EOFError:  # the parent went away
            return
        if kind == "stop":
            return
        try:
            t0 = time.perf_counter()
            adapter.predict(payload)
            answers.send(("ok", time.perf_counter() - t0))
        except Exception as exc:
            answers.send(("error", f"{type(exc).__name__}: {exc}"))


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m infertune.measure.arm_process MODEL_REF")
    answers = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)  # a library's print goes to stderr, never into a message
    child_main(sys.argv[1], Connection(os.dup(0), writable=False), answers)


if __name__ == "__main__":
    main()
