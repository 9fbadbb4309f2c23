"""SIGTERM with 50 requests in flight: the server stops accepting, and every accepted request
is answered. The server is a real `infertune serve` subprocess, as in production."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from conftest import free_port, wait_until

HERE = Path(__file__).parent


def _metric(url: str, name: str) -> float:
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def _refuses_connections(url: str) -> bool:
    try:
        httpx.get(url + "/healthz", timeout=1)
    except httpx.ConnectError:
        return True
    except httpx.HTTPError:
        return False
    return False


@pytest.mark.slow
def test_sigterm_drains_fifty_in_flight_requests(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(HERE), "SERVE_TEST_GATE": str(gate)}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from infertune.cli import entry; entry()", "serve",
         "serve_slow_model:factory", "--port", str(port), "--max-batch-size", "8",
         "--max-wait-ms", "1", "--timeout-ms", "60000"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: proc.poll() is None and _ready(url), 60, interval=0.05)
        with ThreadPoolExecutor(50) as pool, httpx.Client(timeout=60) as client:
            futures = [pool.submit(client.post, url + "/v1/predict",
                                   json={"inputs": [[7.0, float(i), 0.0, 0.0]]})
                       for i in range(50)]
            wait_until(lambda: _metric(url, "infertune_in_flight") == 50, 20, interval=0.02)
            proc.send_signal(signal.SIGTERM)
            wait_until(lambda: _refuses_connections(url), 10, interval=0.02)
            assert not any(f.done() for f in futures)  # all still held when SIGTERM landed
            gate.touch()
            answers = [f.result(timeout=30) for f in futures]
        assert [a.status_code for a in answers] == [200] * 50
        assert [a.json()["outputs"][0][1] for a in answers] == [2.0 * i for i in range(50)]
        # uvicorn re-raises the captured SIGTERM after its graceful exit, so the process ends
        # "killed by SIGTERM" — but only after the drain, and without a traceback.
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
        assert proc.stdout is not None and b"Traceback" not in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
