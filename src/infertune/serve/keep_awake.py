"""Keep the server's cores from idling (``ServePolicy.keep_cores_awake``), for virtual machines.

Why: a virtual CPU with nothing to run halts, and the hypervisor resumes it late when a timer or
a packet arrives for it. Every request wakes the event loop and a worker at least once, so where
the cores idle between requests each wake-up adds to latency. On a 2-core AMD EPYC VM (session
4) a bare 0.2-3 ms timer sleep woke 0.3-9 ms late at p99. ``benchmarks/simulator_vs_measured.py``
serves a small model in process both ways, one after the other, in each run: in 5 runs the
measured p95 was lower with the cores kept awake at 11 of 15 loads (at the lowest load, 0.4, in
all 5: 23-29 ms against 23-37 ms), and the queueing simulator, which models queueing and
service but not the hypervisor, predicted the p95 within +-20% at all three loads in every run
with the cores kept awake (5 of 5, sessions 4-5) and in 3 of 18 with them idle. Session 5's runs
also read the host's steal during each load (/proc/stat: time a virtual CPU was ready but not
running, which includes its wake-up): 0.3-7.4 % of all cores, 3.7 % on average, with idle
cores; 0.1-1.8 %, 0.8 % on average, with the cores kept awake (9 loads each).

What: one child process per core the server may run on, pinned to that core, in Linux's lowest
scheduling class (SCHED_IDLE), spinning. It runs only when nothing else wants the core, so the
core never halts, and any real work takes the core from it at once (its weight is 3 to a normal
task's 1024). The cost: the cores show as 100 % busy, a burstable instance spends its CPU
credits, and the machine draws more power. It is the in-process equivalent of booting with
``idle=poll``, which a user of a VM rarely controls. Off by default.

Each child checks every few milliseconds that the server that started it is still its parent
and exits when not, so a killed server leaves none behind.

One spinner per core per machine, however many servers ask: a child spins only while it holds
an exclusive lock on its core's file in ``lock_dir`` (flock, released by the kernel when the
child dies). Several servers on one machine (Ray Serve replicas, optimize's finalists, a canary
beside the stable release) each start a child per core; one spins and the others wait, trying
the lock twice a second, so when its server goes another takes the core over. Where the lock
file cannot be opened, the child spins anyway: a second idle-class spinner on a core costs
nothing real work wants.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from infertune.errors import ConfigError

# Runs in the child (python -I -S: no site, no user path; starts in ~20 ms). The inner loop
# is ~5 ms of CPython between the parent checks.
_SPIN = """
import fcntl, os, sys, time
core, parent, lock_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
os.sched_setaffinity(0, {core})
os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
try:
    lock = os.open(lock_path, os.O_RDONLY | os.O_CREAT, 0o666)
except OSError:
    lock = None
while os.getppid() == parent:
    if lock is not None:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another server's child spins on this core
            time.sleep(0.5)
            continue
    while os.getppid() == parent:
        for _ in range(200_000):
            pass
"""

# Shared by every server on the machine, whoever runs it (sticky and world-writable, as /tmp).
DEFAULT_LOCK_DIR = Path(tempfile.gettempdir()) / "infertune-keep-awake"


def supported() -> bool:
    """SCHED_IDLE and CPU affinity: Linux."""
    return hasattr(os, "SCHED_IDLE") and hasattr(os, "sched_setaffinity")


class CoreSpinners:
    """The idle-class spinners of one server: ``start()`` one per core, ``stop()`` them all."""

    def __init__(self, cores: Sequence[int] | None = None,
                 lock_dir: Path = DEFAULT_LOCK_DIR) -> None:
        if not supported():
            raise ConfigError("keep_cores_awake needs Linux (SCHED_IDLE and CPU affinity); "
                              "set keep_cores_awake: false on this system")
        self.cores = list(cores) if cores is not None else sorted(os.sched_getaffinity(0))
        self.lock_dir = lock_dir
        self._procs: list[subprocess.Popen[bytes]] = []

    def lock_path(self, core: int) -> Path:
        return self.lock_dir / f"core-{core}.lock"

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def start(self) -> None:
        if self._procs:
            return
        try:
            self.lock_dir.mkdir(mode=0o1777, exist_ok=True)
            if self.lock_dir.stat().st_uid == os.getuid():
                self.lock_dir.chmod(0o1777)  # mkdir's mode is cut by the umask
        except OSError:
            pass  # the children then spin without the lock (see the module's docstring)
        parent = str(os.getpid())
        self._procs = [subprocess.Popen([sys.executable, "-I", "-S", "-c", _SPIN, str(core),
                                         parent, str(self.lock_path(core))],
                                        stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                       for core in self.cores]

    def stop(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self._procs:
            proc.wait(timeout=10)
        self._procs = []
