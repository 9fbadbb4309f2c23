"""Real HTTP for the rollout tests: a uvicorn server on a free loopback port in a thread, and an
open-loop sender (fixed send times, never waiting for answers) that records every answer's
status and X-Release until told to stop, then waits for every request in flight."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serving(app: Any, timeout_s: float = 30) -> Iterator[str]:
    """``app`` under uvicorn at http://127.0.0.1:<port>, yielded once /readyz answers 200."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="on",
                                           log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"server at {url} not ready within {timeout_s} s")
        time.sleep(0.05)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@dataclass
class Answer:
    intended: float  # seconds since the start
    status: int  # 0: no HTTP answer (connection error or timeout)
    release: str


@dataclass
class OpenLoop:
    """POST /v1/predict at ``rate_rps`` with a unit id per request, from a thread; ``body`` is
    one request body, or a list of them sent round-robin."""

    url: str
    rate_rps: float
    body: dict[str, Any] | list[dict[str, Any]]
    headers: dict[str, str] = field(default_factory=dict)
    answers: list[Answer] = field(default_factory=list)
    sent: int = 0
    started: float = 0.0  # time.perf_counter() at the first send

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def __enter__(self) -> OpenLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def releases_after(self, t: float) -> set[str]:
        return {a.release for a in self.answers if a.intended > t}

    async def _run(self) -> None:
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(base_url=self.url, timeout=30, limits=limits) as client:
            tasks = []
            start = self.started = time.perf_counter()
            while not self._stop.is_set():
                intended = self.sent / self.rate_rps
                delay = start + intended - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(self._one(client, intended, self.sent)))
                self.sent += 1
            await asyncio.gather(*tasks)

    async def _one(self, client: httpx.AsyncClient, intended: float, i: int) -> None:
        try:
            body = self.body[i % len(self.body)] if isinstance(self.body, list) else self.body
            r = await client.post("/v1/predict", json=body,
                                  headers={"X-Unit-Id": f"unit-{i}", **self.headers})
            self.answers.append(Answer(intended, r.status_code, r.headers.get("x-release", "")))
        except Exception:  # noqa: BLE001 - any failure is a failed request, never a lost record
            self.answers.append(Answer(intended, 0, ""))
