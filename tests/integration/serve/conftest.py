"""Fixtures for serving integration tests: a real uvicorn server on a free loopback port (in a
background thread, so tests can hold the fake model's gate) and a real redis-server."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from services import missing_service


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running(app, ready: bool = True) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1:<free port>; yields the base URL once it answers (and, with
    ``ready``, once /readyz says warm-up is done)."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                            lifespan="on", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: _answers(url + ("/readyz" if ready else "/healthz")), 20)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def wait_until(check, timeout: float, interval: float = 0.01) -> None:
    """Poll ``check`` until true (a condition, not a fixed sleep); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


class RedisServer:
    def __init__(self, port: int, workdir: Path) -> None:
        self.port = port
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise FileNotFoundError("redis-server")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self._pings, 10)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def _pings(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server on a free loopback port. Missing redis-server fails in CI
    (CI=true) and skips elsewhere, with the command that installs it."""
    server = RedisServer(free_port(), tmp_path)
    try:
        server.start()
    except (FileNotFoundError, AssertionError) as exc:
        missing_service(f"cannot start redis-server ({exc}); run `bash "
                        "scripts/ensure_services.sh`")
    yield server
    server.stop()


def metric(app, name: str, **labels: str) -> float:
    """A sample's current value from the app's own registry (0 when never observed)."""
    value = app.state.metrics.registry.get_sample_value(name, labels or None)
    return 0.0 if value is None else value
