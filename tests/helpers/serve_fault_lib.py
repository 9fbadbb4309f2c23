"""The serving fault scenarios, shared by tests/integration/serve/test_serve_faults.py (short
runs, asserted) and benchmarks/serve_faults.py (longer runs, printed).

Every scenario drives a real `infertune serve` process (model: serve_fault_models:factory,
a fixed service time per batch) with an open-loop client: request i is due at start + i/rate
whatever happened before, and its latency is taken from that intended time. Each returns a
FaultRow: sent, ok (200), failed (4xx other than 429: the request's own fault), shed (429/503),
refused (connection refused: never accepted), lost (accepted, then no HTTP answer), other 5xx,
and the p99 of the admitted (200) requests. A fresh connection reset before any byte of an
answer counts as refused: closing a listening socket resets the connections still waiting in
the kernel's accept queue, which the server never read (the SIGTERM scenario checks this
against the inputs the model actually computed).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
from serve_fault_procs import RedisProcess, ServeProcess, free_port, wait_until

__all__ = ["FaultRow", "Load", "Outcome", "RedisProcess", "ServeProcess", "free_port",
           "open_loop", "vector", "wait_until"]


@dataclass
class Outcome:
    status: int | None  # None: no HTTP answer
    latency_s: float  # from the intended send time
    error: str = ""  # the exception type, or the first words of a non-200 answer
    server_s: float = 0.0  # the Server-Timing stages summed: queue entry -> answer
    from_send_s: float = 0.0  # answer - actual send (the client's own lag left out)


@dataclass
class Load:
    outcomes: list[Outcome]
    lag_p99_ms: float  # client lag: intended send time -> sent


@dataclass
class FaultRow:
    fault: str
    sent: int
    ok: int
    failed: int
    shed: int
    refused: int
    lost: int
    other_5xx: int
    p99_ms: float | None
    notes: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, fault: str, load: Load | list[Outcome], **notes: Any) -> FaultRow:
        outcomes = load.outcomes if isinstance(load, Load) else load
        if isinstance(load, Load):
            notes["client_lag_p99_ms"] = round(load.lag_p99_ms, 1)
        statuses = [o.status for o in outcomes]
        unanswered = Counter(o.error for o in outcomes if o.status is None)
        if unanswered:
            notes["unanswered"] = dict(unanswered)
        admitted = [o.latency_s for o in outcomes if o.status == 200]
        return cls(
            fault=fault, sent=len(outcomes), ok=statuses.count(200),
            failed=sum(1 for s in statuses if s is not None and 400 <= s < 500 and s != 429),
            shed=sum(1 for s in statuses if s in (429, 503)),
            refused=sum(1 for o in outcomes if o.status is None and o.error in NOT_ACCEPTED),
            lost=sum(1 for o in outcomes if o.status is None and o.error not in NOT_ACCEPTED),
            other_5xx=sum(1 for s in statuses if s is not None and s >= 500 and s != 503),
            p99_ms=float(np.percentile(admitted, 99) * 1000) if admitted else None,
            notes={**notes, **_server_p99(outcomes)})

    def line(self) -> str:
        p99 = "-" if self.p99_ms is None else f"{self.p99_ms:.0f}"
        notes = "  ".join(f"{k}={v}" for k, v in self.notes.items())
        return (f"{self.fault:<22} {self.sent:>6} {self.ok:>6} {self.failed:>6} {self.shed:>6} "
                f"{self.refused:>7} {self.lost:>5} {self.other_5xx:>5} {p99:>8}  {notes}")


NOT_ACCEPTED = ("ConnectError", "ResetBeforeAnswer")
HEADER = (f"{'fault':<22} {'sent':>6} {'ok':>6} {'failed':>6} {'shed':>6} {'refused':>7} "
          f"{'lost':>5} {'5xx':>5} {'p99 ms':>8}  notes")


_SERIAL = itertools.count()


def vector(i: int) -> dict[str, Any]:
    """A harmless request body, never sent twice by this process (a serial number in the
    second value), so no scenario is answered from an earlier one's cache; the first value,
    1000 + i, is never -1 or 9 and tells which request of a run a computed row came from."""
    return {"inputs": [[1000.0 + i, float(next(_SERIAL)), 2.0, 3.0]]}


async def open_loop(url: str, rate: float, duration_s: float,
                    body: Callable[[int], dict[str, Any]] = vector, *,
                    keepalive: bool = True, timeout_s: float = 30.0) -> Load:
    """Send rate x duration requests on a fixed schedule; every one gets an Outcome. The
    client is a minimal HTTP/1.1 one on asyncio streams (a pool of keep-alive connections):
    httpx's per-request cost made the client itself fall seconds behind a 120 req/s
    schedule on the shared 2-core machine."""
    loop = asyncio.get_running_loop()
    host, port = url.removeprefix("http://").split(":")
    # (reader, writer, last used): uvicorn closes a keep-alive connection idle for 5 s, so
    # one idle for over 2 s is dropped here rather than reused (a request written to a closed
    # connection would look lost though the server never read it)
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = []
    start = loop.time() + 0.05
    lags: list[float] = []

    async def one(i: int) -> Outcome:
        intended = start + i / rate
        await asyncio.sleep(max(0.0, intended - loop.time()))
        sent = loop.time()
        lags.append(sent - intended)
        payload = json.dumps(body(i)).encode()
        request = (f"POST /v1/predict HTTP/1.1\r\nHost: {host}\r\nContent-Type: "
                   f"application/json\r\nContent-Length: {len(payload)}\r\n"
                   f"{'' if keepalive else 'Connection: close' + chr(13) + chr(10)}\r\n"
                   ).encode() + payload
        reused = _reuse(idle, loop.time())
        try:
            conn = reused or await asyncio.open_connection(host, int(port))
        except OSError:
            return Outcome(None, loop.time() - intended, "ConnectError")
        try:
            async with asyncio.timeout(timeout_s):
                status, text, server_s = await _exchange(conn, request)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
            conn[1].close()
            silent = isinstance(exc, ConnectionResetError) or (
                isinstance(exc, asyncio.IncompleteReadError) and not exc.partial)
            name = "ResetBeforeAnswer" if silent and reused is None else type(exc).__name__
            return Outcome(None, loop.time() - intended, name)
        if keepalive:
            idle.append((*conn, loop.time()))
        else:
            conn[1].close()
        done = loop.time()
        return Outcome(status, done - intended, "" if status == 200 else text[:80], server_s,
                       done - sent)

    outcomes = list(await asyncio.gather(*(one(i) for i in range(int(rate * duration_s)))))
    for _, writer, _ in idle:
        writer.close()
    return Load(outcomes, float(np.percentile(lags, 99) * 1000) if lags else 0.0)


def _reuse(idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]],
           now: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    while idle:
        reader, writer, used = idle.pop()
        if now - used < 2.0 and not reader.at_eof():
            return reader, writer
        writer.close()
    return None


async def _exchange(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                    request: bytes) -> tuple[int, str, float]:
    reader, writer = conn
    writer.write(request)
    await writer.drain()
    status_line = await reader.readuntil(b"\r\n")
    status = int(status_line.split()[1])
    length, server_s = 0, 0.0
    while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
        elif name.strip().lower() == "server-timing":
            server_s = sum(float(part.split("dur=")[1]) for part in value.split(",")
                           if "dur=" in part) / 1000
    return status, (await reader.readexactly(length)).decode("utf-8", "replace"), server_s


def _at(events: list[tuple[float, Callable[[], None]]]) -> threading.Thread:
    """Run each (seconds from now, action) on a background thread."""
    start = time.monotonic()

    def run() -> None:
        for when, action in events:
            time.sleep(max(0.0, start + when - time.monotonic()))
            action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def redis_hang_then_kill(server: ServeProcess, redis: RedisProcess, rate: float,
                         duration_s: float) -> FaultRow:
    """SIGSTOP Redis at 25% of the run, SIGCONT at 50%, SIGKILL at 75%: the cache layer
    times out, backs off and is dropped; no request may fail."""
    events = [(duration_s * 0.25, lambda: redis.signal(signal.SIGSTOP)),
              (duration_s * 0.50, lambda: redis.signal(signal.SIGCONT)),
              (duration_s * 0.75, lambda: redis.signal(signal.SIGKILL))]
    thread = _at(events)
    outcomes = asyncio.run(open_loop(server.url, rate, duration_s,
                                     vector))  # unique inputs: every request reaches Redis
    thread.join()
    return FaultRow.of("redis hang, then kill", outcomes,
                       cache_errors=_metric(server.url, "infertune_cache_errors_total"))


def poisoned_inputs(server: ServeProcess, rate: float, duration_s: float,
                    every: int = 5) -> FaultRow:
    """Every ``every``-th request holds an input the model raises on; batches holding one
    are rerun request by request, so only the poisoned requests fail (422)."""
    def body(i: int) -> dict[str, Any]:
        return {"inputs": [[-1.0, 0.0, 0.0, 0.0]]} if i % every == 0 else vector(i)

    outcomes = asyncio.run(open_loop(server.url, rate, duration_s, body))
    poisoned = [o.status for i, o in enumerate(outcomes.outcomes) if i % every == 0]
    return FaultRow.of("model raises on inputs", outcomes, poisoned=len(poisoned),
                       poisoned_422=poisoned.count(422))


def stalled_call(server: ServeProcess, rate: float, duration_s: float) -> FaultRow:
    """One request stalls the model (workers=1) for the model's stall time, under load: the
    stalled request and the queue behind it are shed with 503 by their deadlines, and
    /healthz keeps answering."""
    health: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        with httpx.Client(timeout=10) as client:
            while not stop.is_set():
                t0 = time.monotonic()
                client.get(server.url + "/healthz")
                health.append(time.monotonic() - t0)
                stop.wait(0.1)

    def body(i: int) -> dict[str, Any]:
        return {"inputs": [[9.0, 0.0, 0.0, 0.0]]} if i == int(rate * 0.2) else vector(i)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    outcomes = asyncio.run(open_loop(server.url, rate, duration_s, body))
    stop.set()
    thread.join()
    stalled = outcomes.outcomes[int(rate * 0.2)]
    return FaultRow.of("stalled model call", outcomes, stalled_status=stalled.status,
                       stalled_answer_ms=round(stalled.latency_s * 1000),
                       healthz_max_ms=round(max(health) * 1000))


def slow_clients(server: ServeProcess, header_tricklers: int, body_tricklers: int,
                 requests: int, trickle_s: float) -> FaultRow:
    """Sockets trickling their headers, and others trickling their bodies, while normal
    requests are sent: the normal ones are answered at normal speed, a trickled body is
    answered 408 after the policy's body_timeout_s."""
    stop = threading.Event()
    body_answers: list[int | None] = []

    def header_trickle() -> None:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\n")
            while not stop.wait(0.2):
                sock.sendall(b"X")

    def body_trickle() -> None:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: "
                         b"application/json\r\nContent-Length: 1000\r\n\r\n{")
            deadline = time.monotonic() + trickle_s
            sock.settimeout(0.2)
            reply = b""
            while time.monotonic() < deadline and not reply:
                with contextlib.suppress(OSError):
                    sock.sendall(b" ")
                with contextlib.suppress(TimeoutError, OSError):
                    reply = sock.recv(4096)
            parts = reply.split(b" ", 2)
            body_answers.append(int(parts[1]) if len(parts) > 1 and parts[1].isdigit()
                                else None)

    threads = [threading.Thread(target=header_trickle, daemon=True)
               for _ in range(header_tricklers)]
    threads += [threading.Thread(target=body_trickle, daemon=True)
                for _ in range(body_tricklers)]
    for thread in threads:
        thread.start()
    outcomes = []
    with httpx.Client(timeout=30) as client:
        for i in range(requests):
            t0 = time.monotonic()
            try:
                answer = client.post(server.url + "/v1/predict", json=vector(i))
                outcomes.append(Outcome(answer.status_code, time.monotonic() - t0))
            except httpx.HTTPError as exc:
                outcomes.append(Outcome(None, time.monotonic() - t0, type(exc).__name__))
    for thread in threads[header_tricklers:]:
        thread.join(timeout=trickle_s + 5)
    stop.set()
    trickled = [Outcome(s, 0.0, "" if s is not None else "no answer") for s in body_answers]
    row = FaultRow.of("slow clients", outcomes + trickled,
                      header_tricklers=header_tricklers, body_408=body_answers.count(408))
    # the trickled bodies have no meaningful latency: p99 is over the normal requests only
    row.p99_ms = FaultRow.of("", outcomes).p99_ms
    return row


def sigterm_under_load(server: ServeProcess, rate: float, duration_s: float,
                       at: float = 0.4) -> FaultRow:
    """SIGTERM at ``at`` of the run, one connection per request: every request is either
    answered or refused a connection; none is accepted and then dropped."""
    thread = _at([(duration_s * at, server.terminate)])
    load = asyncio.run(open_loop(server.url, rate, duration_s, keepalive=False))
    thread.join()
    assert server.proc is not None
    code = server.proc.wait(timeout=60)
    computed = {round(float(v)) - 1000 for line in server.seen.read_text().split("\n")
                for v in line.split() if float(v) >= 1000}
    unanswered = sorted(i for i in computed if load.outcomes[i].status is None)
    # a request the server read and computed but never answered would be lost for good
    return FaultRow.of("SIGTERM under load", load, exit_code=code,
                       computed_not_answered=len(unanswered))


def overload(server: ServeProcess, capacity_rps: float, factor: float,
             duration_s: float) -> FaultRow:
    """Open-loop load at ``factor`` x capacity with no deadline configured: only 200, 429 and
    503 answers, and the admitted p99 within the bound /readyz states (answer_bound_ms: the
    default deadline plus one batch time, from entering the queue), read before and after."""
    before = server.readyz()
    load = asyncio.run(open_loop(server.url, capacity_rps * factor, duration_s))
    after = server.readyz()
    ok = sum(o.status == 200 for o in load.outcomes)
    return FaultRow.of(
        f"{factor:g}x capacity", load, goodput_rps=round(ok / duration_s, 1),
        deadline_ms=round(min(before["default_deadline_ms"], after["default_deadline_ms"]), 1),
        bound_ms=round(min(before["answer_bound_ms"], after["answer_bound_ms"]), 1))


def _server_p99(outcomes: list[Outcome]) -> dict[str, float]:
    """The admitted requests' p99 from the actual send (client lag left out) and of queue
    entry -> answer (what the deadline bounds, from Server-Timing), when the client has them."""
    out = {}
    for name, values in (("p99_from_send_ms", [o.from_send_s for o in outcomes]),
                         ("server_p99_ms", [o.server_s for o in outcomes])):
        admitted = [v for v, o in zip(values, outcomes, strict=True) if o.status == 200 and v > 0]
        if admitted:
            out[name] = round(float(np.percentile(admitted, 99)) * 1000, 1)
    return out


def _metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics", timeout=5).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))
