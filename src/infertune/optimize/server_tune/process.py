"""One candidate's server as a child process: started in a process group of its own on a free
port of 127.0.0.1, ready once ``GET ready_path`` answers 200, its memory sampled while it runs,
and stopped with its whole group (a server that forks workers, as vLLM and TGI do, leaves none
behind).

A server that exits or never becomes ready is a one-line ConfigError naming the command and the
last line it wrote to stderr (its whole stderr is kept in the log file beside the run).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

import psutil

from infertune.errors import ConfigError

POLL_S = 0.2
STOP_GRACE_S = 10.0
MIB = 1024 * 1024


def free_port() -> int:
    """A port no one listens on now (the OS picks it; a race with another process binding it
    before the server does shows as a server that fails to start, with its stderr)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines()]
    except OSError:
        return "(no stderr)"
    lines = [ln for ln in lines if ln]
    return lines[-1][:300] if lines else "(nothing on stderr)"


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants, now (0 when it is gone)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return total


class ServerProcess:
    """``with ServerProcess(argv, port, log) as server:`` -> ready at ``server.base_url``."""

    def __init__(self, argv: list[str], port: int, log: Path, *, ready_path: str = "/v1/models",
                 ready_timeout_s: float = 120.0, env: dict[str, str] | None = None) -> None:
        if not ready_path.startswith("/"):
            raise ConfigError(f"--ready-path {ready_path!r} must start with /, e.g. /v1/models")
        self.argv, self.port, self.log = argv, port, log
        self.ready_path, self.ready_timeout_s = ready_path, ready_timeout_s
        self.env = env
        self.base_url = f"http://127.0.0.1:{port}"
        self.peak_rss_bytes = 0
        self.pid: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stop_sampling = threading.Event()
        self._sampler: threading.Thread | None = None

    def __enter__(self) -> ServerProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as err:
            try:
                self._proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                              stdout=subprocess.DEVNULL, stderr=err,
                                              start_new_session=True, env=self.env)
                self.pid = self._proc.pid
            except OSError as exc:
                raise ConfigError(f"--server-cmd could not start {self.argv[0]!r} ({exc}); "
                                  "check the program's name and PATH") from exc
        self._sampler = threading.Thread(target=self._sample, name="server-rss", daemon=True)
        self._sampler.start()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.ready_timeout_s
        url = self.base_url + self.ready_path
        while time.monotonic() < deadline:
            code = self._proc.poll()
            if code is not None:
                raise ConfigError(f"the server exited with code {code} before it was ready "
                                  f"({shlex.join(self.argv)}); its last stderr line: "
                                  f"{last_line(self.log)}")
            if _answers(url):
                return
            time.sleep(POLL_S)
        raise ConfigError(f"the server did not answer GET {self.ready_path} within "
                          f"{self.ready_timeout_s:g} s ({shlex.join(self.argv)}); its last stderr "
                          f"line: {last_line(self.log)}; raise --ready-timeout or fix "
                          "--ready-path")

    def _sample(self) -> None:
        while not self._stop_sampling.is_set():
            if self._proc is not None:
                self.peak_rss_bytes = max(self.peak_rss_bytes, tree_rss_bytes(self._proc.pid))
            self._stop_sampling.wait(0.25)

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after a grace period."""
        self._stop_sampling.set()
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=STOP_GRACE_S)
        # children that outlived the leader are in the same group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if self._sampler is not None:
            self._sampler.join(timeout=2)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False
