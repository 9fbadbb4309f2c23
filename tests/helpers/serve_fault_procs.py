"""Real processes for the serving fault suite: `infertune serve` on the fault model
(serve_fault_models.py) and a private redis-server, each on a free loopback port."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

HELPERS = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(check: Callable[[], bool], timeout: float, interval: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


class ServeProcess:
    """`infertune serve serve_fault_models:factory` in a subprocess on a free loopback port."""

    def __init__(self, workdir: Path, *, service_ms: float = 100, stall_s: float = 3,
                 max_batch_size: int = 4, max_wait_ms: float = 5,
                 policy: dict[str, Any] | None = None, extra: tuple[str, ...] = (),
                 model: str = "serve_fault_models:factory") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"serve-{self.port}.log"
        config = workdir / f"serve-{self.port}.yaml"
        config.write_text("".join(f"{k}: {v}\n" for k, v in (policy or {}).items()))
        self.args = [sys.executable, "-c", "from infertune.cli import entry; entry()", "serve",
                     model, "--port", str(self.port),
                     "--max-batch-size", str(max_batch_size), "--max-wait-ms", str(max_wait_ms),
                     "--config", str(config), *extra]
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(HELPERS), os.environ.get("PYTHONPATH", "")]),
            "SERVE_FAULT_SERVICE_MS": str(service_ms), "SERVE_FAULT_STALL_S": str(stall_s),
            "SERVE_FAULT_SEEN": str(workdir / f"seen-{self.port}.txt")}
        self.seen = Path(self.env["SERVE_FAULT_SEEN"])
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 120) -> ServeProcess:
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(self.args, env=self.env, stdout=log,
                                         stderr=subprocess.STDOUT)
        wait_until(self._ready, timeout_s, interval=0.1)
        return self

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"serve exited with {self.proc.returncode}: "
                                 f"{self.log.read_text()[-2000:]}")
        try:
            return httpx.get(self.url + "/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def readyz(self) -> dict[str, Any]:
        answer: dict[str, Any] = httpx.get(self.url + "/readyz", timeout=5).json()
        return answer

    def rss_mb(self) -> float:
        """The server process's resident memory (Linux /proc)."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def terminate(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    @contextlib.contextmanager
    def running(self) -> Iterator[ServeProcess]:
        try:
            yield self.start()
        finally:
            self.stop()


class RedisProcess:
    """A private redis-server on a free loopback port."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisProcess:
        binary = shutil.which("redis-server")
        if binary is None:
            raise FileNotFoundError("redis-server is not installed; run "
                                    "`bash scripts/ensure_services.sh`")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self._pings, 10)
        return self

    def _pings(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
        self.proc = None
