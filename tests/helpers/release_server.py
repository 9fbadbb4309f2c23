"""`infertune serve --registry DIR --stable A [--canary B] [--shadow C]` in its own process on
a free loopback port (the command users run; its own process, so the test's open-loop sender
and the server do not share one interpreter's lock)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from rollout_load import free_port


@contextlib.contextmanager
def release_server(registry: Path, stable: str, *, canary: str | None = None,
                   shadow: str | None = None, api_key_env: str = "INFERTUNE_API_KEY",
                   env: dict[str, str] | None = None, extra: tuple[str, ...] = (),
                   timeout_s: float = 120) -> Iterator[str]:
    """The server's URL once /readyz answers 200; SIGTERM and wait when done."""
    port = free_port()
    args = [sys.executable, "-c", "from infertune.cli import entry; entry()", "serve",
            "--registry", str(registry), "--stable", stable, "--port", str(port),
            "--api-key-env", api_key_env, "--timeout-ms", "30000", *extra]
    if canary:
        args += ["--canary", canary]
    if shadow:
        args += ["--shadow", shadow]
    log = registry.parent / f"serve-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env={**os.environ, **(env or {})}, stdout=out,
                                stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"serve exited {proc.returncode}: "
                                     f"{log.read_text()[-2000:]}")
            try:
                if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"serve not ready in {timeout_s} s: "
                                     f"{log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
