"""serve/keep_awake.py: an idle-class spinner per core while a runtime serves, gone after it, and
gone when the server dies; refused with a clear error where Linux's SCHED_IDLE is missing."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from infertune.config import ServePolicy
from infertune.errors import ConfigError
from infertune.serve import keep_awake
from infertune.serve.keep_awake import CoreSpinners
from infertune.serve.prometheus_metrics import ServeMetrics
from infertune.serve.runtime import ServeRuntime
from infertune.serve.testing import GatedAdapter

linux = pytest.mark.skipif(not keep_awake.supported(), reason="SCHED_IDLE is Linux's")


def _wait_for(check, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def _settled(pid: int, core: int) -> bool:
    """The child has pinned itself and switched to SCHED_IDLE (it does so right after start)."""
    try:
        return (os.sched_getscheduler(pid) == os.SCHED_IDLE
                and os.sched_getaffinity(pid) == {core})
    except ProcessLookupError:
        return False


@linux
def test_one_idle_class_spinner_per_core_while_serving_and_none_after() -> None:
    cores = sorted(os.sched_getaffinity(0))

    async def scenario() -> list[int]:
        runtime = ServeRuntime(GatedAdapter(), ServePolicy(keep_cores_awake=True),
                               clock=time.monotonic, metrics=ServeMetrics())
        assert runtime.spinners is not None and runtime.spinners.pids == []  # not started
        await runtime.start()
        pids = runtime.spinners.pids
        assert len(pids) == len(cores)
        for pid, core in zip(pids, cores, strict=True):
            assert _wait_for(lambda p=pid, c=core: _settled(p, c)), (pid, core)
        await runtime.stop()
        return pids

    pids = asyncio.run(scenario())
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                   for p in pids)
    plain = ServeRuntime(GatedAdapter(), ServePolicy(), clock=time.monotonic,
                         metrics=ServeMetrics())
    assert plain.spinners is None  # off by default


@linux
@pytest.mark.slow  # serial: beside busy test workers an idle-class task gets ~0.3 % of a core
def test_a_spinner_uses_the_cpu_nothing_else_wants() -> None:
    spinners = CoreSpinners(cores=[sorted(os.sched_getaffinity(0))[0]])
    spinners.start()
    try:
        (pid,) = spinners.pids
        proc = psutil.Process(pid)
        before = sum(proc.cpu_times()[:2])
        time.sleep(1.0)
        # alone on an idle core it spins most of the second
        assert sum(proc.cpu_times()[:2]) - before > 0.05
    finally:
        spinners.stop()
    assert spinners.pids == []


def _lock_holder(path: Path) -> int | None:
    """The pid holding an flock on ``path``, from /proc/locks (None when nobody does)."""
    if not path.exists():
        return None
    inode = path.stat().st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if fields[1] == "FLOCK" and int(fields[5].rsplit(":", 1)[1]) == inode:
            return int(fields[4])
    return None


@linux
@pytest.mark.slow  # serial: beside busy test workers an idle-class child starts slowly
@pytest.mark.timeout(120)
def test_one_spinner_per_core_however_many_servers_ask(tmp_path: Path) -> None:
    core = sorted(os.sched_getaffinity(0))[0]
    first = CoreSpinners(cores=[core], lock_dir=tmp_path)
    second = CoreSpinners(cores=[core], lock_dir=tmp_path)
    lock = first.lock_path(core)
    first.start()
    try:
        assert _wait_for(lambda: _lock_holder(lock) == first.pids[0], timeout_s=30.0)
        second.start()
        (waiting,) = second.pids
        # settled in SCHED_IDLE, then asleep between tries of the lock: it does not spin
        assert _wait_for(lambda: _settled(waiting, core)
                         and psutil.Process(waiting).status() == psutil.STATUS_SLEEPING,
                         timeout_s=30.0)
        assert _lock_holder(lock) == first.pids[0]
        first.stop()  # the first server goes: the second's child takes the core over
        assert _wait_for(lambda: _lock_holder(lock) == waiting, timeout_s=30.0)
        assert psutil.Process(waiting).status() != psutil.STATUS_SLEEPING or \
            _wait_for(lambda: psutil.Process(waiting).status() != psutil.STATUS_SLEEPING)
    finally:
        first.stop()
        second.stop()


@linux
@pytest.mark.timeout(90)
def test_spinners_exit_when_their_server_is_killed() -> None:
    code = ("import sys, time\n"
            "from infertune.serve.keep_awake import CoreSpinners\n"
            "s = CoreSpinners(cores=[0]); s.start()\n"
            "print(s.pids[0], flush=True)\n"
            "time.sleep(60)\n")
    server = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    child = int(server.stdout.readline())
    assert psutil.pid_exists(child)
    server.kill()  # no stop(): the child must notice its parent is gone
    server.wait(timeout=10)

    def gone() -> bool:
        try:
            return psutil.Process(child).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    # it checks its parent every ~5 ms of its own CPU time, which an idle-class task gets
    # slowly while the suite's other worker keeps the cores busy
    assert _wait_for(gone, timeout_s=45.0), "a spinner outlived its server"


def test_where_linux_scheduling_is_missing_it_is_a_clear_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keep_awake, "supported", lambda: False)
    with pytest.raises(ConfigError, match="keep_cores_awake needs Linux.*keep_cores_awake: false"):
        CoreSpinners()
    with pytest.raises(ConfigError, match="keep_cores_awake needs Linux"):
        ServeRuntime(GatedAdapter(), ServePolicy(keep_cores_awake=True), clock=time.monotonic,
                     metrics=ServeMetrics())
