"""Keep the server's cores from idling (``ServePolicy.keep_cores_awake``), for virtual machines.

Why: a virtual CPU with nothing to run halts, and the hypervisor resumes it late when a timer or
a packet arrives for it. Every request wakes the event loop and a worker at least once, so where
the cores idle between requests each wake-up adds to latency. On a 2-core AMD EPYC VM (session
4) a bare 0.2-3 ms timer sleep woke 0.3-9 ms late at p99. ``benchmarks/simulator_vs_measured.py``
serves a small model in process both ways, one after the other, in each run: in 5 runs the
measured p95 was lower with the cores kept awake at 11 of 15 loads (at the lowest load, 0.4, in
all 5: 23-29 ms against 23-37 ms), and the queueing simulator, which models queueing and
service but not the hypervisor, predicted the p95 within +-20% at all three loads in 3 runs with
the cores kept awake and in none with them idle.

What: one child process per core the server may run on, pinned to that core, in Linux's lowest
scheduling class (SCHED_IDLE), spinning. It runs only when nothing else wants the core, so the
core never halts, and any real work takes the core from it at once (its weight is 3 to a normal
task's 1024). The cost: the cores show as 100 % busy, a burstable instance spends its CPU
credits, and the machine draws more power. It is the in-process equivalent of booting with
``idle=poll``, which a user of a VM rarely controls. Off by default.

Each child checks every few milliseconds that the server that started it is still its parent
and exits when not, so a killed server leaves none behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

from infertune.errors import ConfigError

# Runs in the child (python -I -S: no site, no user path; starts in ~20 ms). The inner loop
# is ~5 ms of CPython between the parent checks.
_SPIN = """
import os, sys
core, parent = int(sys.argv[1]), int(sys.argv[2])
os.sched_setaffinity(0, {core})
os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
while os.getppid() == parent:
    for _ in range(200_000):
        pass
"""


def supported() -> bool:
    """SCHED_IDLE and CPU affinity: Linux."""
    return hasattr(os, "SCHED_IDLE") and hasattr(os, "sched_setaffinity")


class CoreSpinners:
    """The idle-class spinners of one server: ``start()`` one per core, ``stop()`` them all."""

    def __init__(self, cores: Sequence[int] | None = None) -> None:
        if not supported():
            raise ConfigError("keep_cores_awake needs Linux (SCHED_IDLE and CPU affinity); "
                              "set keep_cores_awake: false on this system")
        self.cores = list(cores) if cores is not None else sorted(os.sched_getaffinity(0))
        self._procs: list[subprocess.Popen[bytes]] = []

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def start(self) -> None:
        if self._procs:
            return
        parent = str(os.getpid())
        self._procs = [subprocess.Popen([sys.executable, "-I", "-S", "-c", _SPIN, str(core),
                                         parent], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                       for core in self.cores]

    def stop(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self._procs:
            proc.wait(timeout=10)
        self._procs = []
