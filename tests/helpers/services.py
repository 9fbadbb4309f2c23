"""One rule for tests that need a service or tool the project installs (redis-server,
chromium, promtool): in CI it is a failure, never a skip, because `.ci/run` installs and starts
them (scripts/ensure_services.sh); on a developer's machine it is a skip that says how to
install it. CI is any non-empty CI value but "false"/"0" (.ci/run exports CI=true).
``prometheus_server`` starts a private Prometheus scraping `infertune serve`."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import httpx
import pytest
import yaml


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing_service(message: str) -> NoReturn:
    """Fail in CI, skip elsewhere; ``message`` says what is missing and how to install it."""
    if in_ci():
        pytest.fail(f"{message} (CI must have it: bash scripts/ensure_services.sh)")
    pytest.skip(message)


@contextlib.contextmanager
def prometheus_server(workdir: Path, targets: list[str], *, bearer: str | None = None,
                      scrape_interval: str = "1s",
                      timeout_s: float = 60) -> Iterator[str]:
    """A private Prometheus (Debian's `prometheus`, the server beside promtool) on a free
    loopback port, scraping ``targets`` ("127.0.0.1:PORT", path /metrics) every
    ``scrape_interval``, with ``bearer`` as the API key; yields its URL once /-/ready answers.
    Missing: a failure in CI, a skip elsewhere (missing_service)."""
    binary = shutil.which("prometheus")
    if binary is None:
        missing_service("prometheus not found; install Debian's prometheus package "
                        "(bash scripts/ensure_services.sh)")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    job: dict[str, object] = {"job_name": "infertune", "metrics_path": "/metrics",
                              "static_configs": [{"targets": targets}]}
    if bearer is not None:
        job["authorization"] = {"type": "Bearer", "credentials": bearer}
    config = workdir / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "scrape_configs": [job]}))
    log = workdir / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([binary, f"--config.file={config}",
                                 f"--storage.tsdb.path={workdir / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                                stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"prometheus exited {proc.returncode}: "
                                     f"{log.read_text()[-2000:]}")
            try:
                if httpx.get(url + "/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"prometheus not ready in {timeout_s} s")
            time.sleep(0.1)
        yield url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
