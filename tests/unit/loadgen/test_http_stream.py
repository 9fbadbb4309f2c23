"""The streaming load generator's own HTTP/1.1 client (http_stream.py), its precise timers
(precise_loop.py), the runner's learned spin margin, and the fake LLM server it is benchmarked
against (fake_llmserver.py).

The client's framing is tested by feeding a connection bytes split at every size, on a counting
clock, so each body byte's read time is known exactly; the pool, keep-alive, retries, timeouts
and failures against real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import itertools
import json
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import psutil
import pytest

from infertune.errors import ConfigError
from infertune.loadgen.fake_llmserver import FakeConfig, FakeProtocol, Lockstep
from infertune.loadgen.http_stream import RawResponse, StreamClient, _Connection
from infertune.loadgen.openai import OpenAITarget, Prompt
from infertune.loadgen.precise_loop import (
    MAX_EVENTS,
    PreciseEpollSelector,
    is_precise,
    new_precise_loop,
    precise_runner,
)
from infertune.loadgen.result import RequestRecord
from infertune.loadgen.runner import SPIN_FLOOR_S, RunOptions, _Waker

CHUNKED = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nServer-Timing: q;dur=2\r\n\r\n"
           b"5\r\nhello\r\nA;ext=1\r\n, streamed\r\n0\r\nX-Trailer: t\r\n\r\n")
BODY = b"hello, streamed"


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        self.closed = True


def feed(raw: bytes, size: int, lose: bool = False) -> tuple[RawResponse, _Connection]:
    """Feed ``raw`` to a connection in pieces of ``size`` bytes; the clock counts reads."""
    ticks = itertools.count(1)

    async def scenario() -> tuple[RawResponse, _Connection]:
        connection = _Connection(lambda: float(next(ticks)))
        connection.connection_made(FakeTransport())
        response = RawResponse(started=0.0)
        finished = connection.start(b"GET / HTTP/1.1\r\n\r\n", response)
        for at in range(0, len(raw), size):
            connection.data_received(raw[at:at + size])
        if lose:
            connection.connection_lost(None)
        assert finished.done() or not response.complete
        return response, connection

    return asyncio.run(scenario())


@pytest.mark.parametrize("size", [1, 2, 3, 7, 16, len(CHUNKED)])
def test_chunked_body_split_anywhere(size: int) -> None:
    response, connection = feed(CHUNKED, size)
    assert response.status == "200" and response.complete and connection.reusable
    assert response.body == BODY and response.headers["server-timing"] == "q;dur=2"
    # each body byte carries the clock of the read that brought it: read n (counted from 1)
    # holds the raw bytes [(n - 1) x size, n x size)
    head = CHUNKED.index(b"\r\n\r\n") + 4
    second = CHUNKED.index(b", streamed")
    positions = [head + 3 + k for k in range(5)] + [second + k for k in range(10)]
    stamps = [at for at, piece in response.chunks for _ in piece]
    assert stamps == [float(p // size + 1) for p in positions]


def test_content_length_close_delimited_and_lost_bodies() -> None:
    length = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
    response, connection = feed(length, 4)
    assert response.complete and response.body == b"hello" and connection.reusable
    assert all(response.pieces) and len(response.times) == len(response.pieces)
    until_close = b"HTTP/1.0 200 OK\r\n\r\npart one, part two"
    response, connection = feed(until_close, 5)
    assert not response.complete and response.body == b"part one, part two"
    response, connection = feed(until_close, 5, lose=True)  # the close ends the body
    assert response.complete and response.status == "200" and not connection.reusable
    response, _ = feed(CHUNKED[:-20], 6, lose=True)  # cut inside a chunk
    assert (response.status, response.complete) == ("stream_error", False)
    response, _ = feed(b"HTTP/1.1 200 O", 3, lose=True)  # cut inside the head
    assert (response.status, response.complete) == ("connection_error", False)
    response, connection = feed(b"SSH-2.0-OpenSSH\r\n\r\n", 64)  # not HTTP at all
    assert response.status == "error" and connection.closed
    response, _ = feed(b"HTTP/1.1 100 Continue\r\n\r\n" + length, 9)
    assert response.status == "200" and response.body == b"hello"
    response, connection = feed(b"HTTP/1.1 503 Busy\r\nConnection: close\r\n"
                                b"Content-Length: 2\r\n\r\nno", 64)
    assert response.status == "503" and response.complete and not connection.reusable
    response, _ = feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 64)
    assert response.status == "stream_error"  # a chunk size that is not hex


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _serve(handler: Handler) -> tuple[asyncio.Server, str, list[int]]:
    accepted: list[int] = []

    async def counted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        await handler(reader, writer)

    server = await asyncio.start_server(counted, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1/chat/completions", accepted


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length")), 0)
    return head + await reader.readexactly(length)


@pytest.mark.timeout(30)
def test_client_reuses_connections_and_retries_one_closed_while_idle() -> None:
    async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await _read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            writer.write(CHUNKED)

    async def one_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(CHUNKED)  # says nothing of closing, then closes: a keep-alive timeout
        await writer.drain()
        writer.close()

    async def scenario(handler: Handler) -> tuple[list[RawResponse], int]:
        server, url, accepted = await _serve(handler)
        async with server:
            client = StreamClient(url, timeout_s=5, clock=lambda: 0.0)
            request = client.request_bytes("POST", b"{}", headers={"X-A": "1"})
            out = []
            for _ in range(3):
                out.append(await client.send(request, 0.0))
                await asyncio.sleep(0.05)  # the server's close, if any, lands while idle
            await client.close()
        return out, len(accepted)

    replies, connections = asyncio.run(scenario(keep_alive))
    assert [r.body for r in replies] == [BODY] * 3 and connections == 1
    replies, connections = asyncio.run(scenario(one_then_close))
    assert [r.status for r in replies] == ["200"] * 3 and connections == 3


@pytest.mark.timeout(30)
def test_client_failures_are_statuses() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)

    async def scenario() -> tuple[str, str]:
        server, url, _ = await _serve(silent)
        async with server:
            client = StreamClient(url, timeout_s=0.2, clock=lambda: 0.0)
            timed_out = await client.send(client.request_bytes("GET"), 0.0)
            await client.close()
        with socket.socket() as probe:  # a port nobody listens on
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        refused = StreamClient(f"http://127.0.0.1:{port}/", timeout_s=1, clock=lambda: 0.0)
        return timed_out.status, (await refused.send(refused.request_bytes("GET"), 0.0)).status

    assert asyncio.run(scenario()) == ("timeout", "connection_error")
    with pytest.raises(ConfigError, match="is not an http"):
        StreamClient("ftp://host/x", timeout_s=1, clock=lambda: 0.0)


def test_request_bytes() -> None:
    client = StreamClient("http://example.test:8080/v1/completions?a=1", timeout_s=1,
                          clock=lambda: 0.0)
    raw = client.request_bytes("POST", b'{"x": 1}', headers={"Accept": "text/event-stream"})
    assert raw.startswith(b"POST /v1/completions?a=1 HTTP/1.1\r\nHost: example.test:8080\r\n")
    assert raw.endswith(b"Accept: text/event-stream\r\nContent-Length: 8\r\n\r\n{\"x\": 1}")


@pytest.mark.timeout(30)
def test_precise_loop_and_the_learned_spin_margin() -> None:
    async def scenario() -> tuple[bool, list[float], float, float]:
        loop = asyncio.get_running_loop()
        waker = _Waker(loop.time, cap_s=0.002)
        assert waker.margin_s == 0.002  # cautious before any wake-up is measured
        early = []
        for i in range(20):
            deadline = loop.time() + 0.001 + i * 0.0002
            await waker.wait_until(deadline)
            early.append(deadline - loop.time())
        never = _Waker(loop.time, cap_s=0.0)
        await never.wait_until(loop.time() + 0.001)
        return is_precise(loop), early, waker.margin_s, never.margin_s

    with precise_runner() as runner:
        precise, early, margin, never = runner.run(scenario())
    assert precise and not is_precise(asyncio.new_event_loop())
    assert max(early) <= 0.0  # never returns before the send is due
    assert SPIN_FLOOR_S <= margin <= 0.002 and never == 0.0
    new_precise_loop().close()
    for bad in (-0.001, float("nan")):
        with pytest.raises(ConfigError, match="must be >= 0 ms.*--spin-ms 0"):
            RunOptions(spin_s=bad)


def test_an_infinite_spin_never_sleeps_and_still_handles_replies() -> None:
    """spin_s=inf (--spin-ms inf): the runner busy-waits for every send, so a core that would
    wake late from idle never idles; the loop still runs other callbacks meanwhile."""
    async def scenario() -> tuple[list[float], int, float]:
        loop = asyncio.get_running_loop()
        waker = _Waker(loop.time, cap_s=float("inf"))
        sleeps = []
        real_sleep = asyncio.sleep

        async def counting_sleep(delay: float) -> None:
            sleeps.append(delay)
            await real_sleep(delay)

        handled = []
        loop.call_later(0.002, handled.append, 1)  # a "reply" due during the wait
        asyncio.sleep = counting_sleep  # type: ignore[assignment]
        try:
            deadline = loop.time() + 0.005
            await waker.wait_until(deadline)
            late = loop.time() - deadline
        finally:
            asyncio.sleep = real_sleep  # type: ignore[assignment]
        return sleeps, len(handled), late

    with precise_runner() as runner:
        sleeps, handled, late = runner.run(scenario())
    assert sleeps and set(sleeps) == {0}  # only yields, never a timed sleep
    assert handled == 1 and late >= 0.0


def test_precise_selector_waits_to_the_microsecond_and_caps_events_per_wait() -> None:
    pairs = [socket.socketpair() for _ in range(2 * MAX_EVENTS + 5)]
    selector = PreciseEpollSelector()
    try:
        for i, (a, _) in enumerate(pairs):
            selector.register(a, selectors.EVENT_READ, data=i)
        started = time.perf_counter()
        assert selector.select(0.002) == []  # nothing ready: waits, returns nothing
        assert time.perf_counter() - started >= 0.002
        for _, b in pairs:
            b.send(b"x")
        seen: set[int] = set()
        for _ in range(3):  # level-triggered: what one wait leaves out, the next reports
            events = selector.select(0.5)
            assert len(events) <= MAX_EVENTS
            assert all(mask == selectors.EVENT_READ for _, mask in events)
            seen |= {key.data for key, _ in events}
        assert seen == set(range(len(pairs)))
    finally:
        selector.close()
        for a, b in pairs:
            a.close()
            b.close()


def _fake_exchange(requests: list[bytes]) -> list[RawResponse]:
    async def scenario() -> list[RawResponse]:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: FakeProtocol(FakeConfig(itl_ms=0.5)),
                                          "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = StreamClient(f"http://127.0.0.1:{port}/v1/chat/completions", timeout_s=5,
                              clock=loop.time)
        out = [await client.send(r, 0.0) for r in requests]
        await client.close()
        server.close()
        return out

    return asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_fake_server_streams_on_its_timer_and_answers_bad_requests_400() -> None:
    probe = StreamClient("http://127.0.0.1:1/v1/chat/completions", timeout_s=1,
                         clock=lambda: 0.0)

    def post(body: object, path: str | None = None) -> bytes:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        return probe.request_bytes("POST", raw, path=path)

    stream = {"max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}}
    replies = _fake_exchange([
        post(b"{not json"), post([1]), post({"max_tokens": 0}), post(stream),
        post({"max_tokens": 2}, path="/v1/completions"), probe.request_bytes("GET", path="/x"),
        probe.request_bytes("GET", path="/v1/models")])
    bad = [json.loads(r.body)["error"]["message"] for r in replies[:3]]
    assert [r.status for r in replies[:3]] == ["400"] * 3
    assert bad == ["the body is not valid JSON", "the body must be a JSON object",
                   "'max_tokens' must be an integer >= 1, got 0"]
    streamed = replies[3]
    assert streamed.status == "200" and streamed.complete
    events = [line[6:] for line in streamed.body.decode().split("\n") if line.startswith("data:")]
    assert events[-1] == "[DONE]" and len(events) == 5  # 3 tokens, usage + timing, [DONE]
    tokens = [json.loads(e)["choices"][0]["delta"]["content"] for e in events[:3]]
    assert tokens == [" tok"] * 3
    last = json.loads(events[3])
    assert last["usage"]["completion_tokens"] == 3
    timing = last["infertune_timing"]
    writes = list(itertools.accumulate(timing["gaps_ms"], initial=timing["ttft_ms"]))
    # token k is due at arrival + k x 0.5 ms: never sooner (a late one is not made up for by
    # pushing the rest back)
    assert len(writes) == 3 and all(w >= k * 0.5 - 0.001 for k, w in enumerate(writes))
    whole = json.loads(replies[4].body)
    assert whole["choices"][0]["text"] == " tok tok" and whole["usage"]["completion_tokens"] == 2
    assert replies[5].status == "404"
    assert json.loads(replies[6].body)["data"][0]["id"] == "infertune-fake-llm"
    with pytest.raises(ValueError, match="must be >= 0"):
        FakeConfig(itl_ms=-1)
    with pytest.raises(ValueError, match="--lockstep needs --itl-ms > 0"):
        FakeConfig(itl_ms=0, lockstep=True)


@pytest.mark.timeout(30)
def test_lockstep_steps_every_stream_together_until_each_is_done() -> None:
    steps: list[tuple[str, int]] = []

    class Member:
        def __init__(self, name: str, tokens: int) -> None:
            self.name, self.left = name, tokens

        def tick(self) -> None:
            steps.append((self.name, len(steps)))
            self.left -= 1
            if self.left == 0:
                clock.leave(self)  # type: ignore[arg-type]

    async def scenario() -> None:
        clock.join(Member("a", 3))  # type: ignore[arg-type]
        clock.join(Member("b", 2))  # type: ignore[arg-type]
        while clock._timer is not None:
            await asyncio.sleep(0.001)

    clock = Lockstep(0.001)
    asyncio.run(scenario())
    # step 1: a, b; step 2: a, b (b done); step 3: a alone; then the clock stops
    assert [name for name, _ in steps] == ["a", "b", "a", "b", "a"]
    assert not clock.members


def test_events_are_parsed_after_the_run_with_the_time_of_the_read_that_completed_them() -> None:
    target = OpenAITarget("http://127.0.0.1:9/v1/chat/completions", "openai-chat",
                          [Prompt((), 4)], model="m")

    def token(text: str) -> bytes:
        return b"data: " + json.dumps({"choices": [{"delta": {"content": text}}]}).encode()

    usage = b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}'
    whole = token("a") + b"\n\n" + token("b") + b"\n\n" + usage + b"\n\ndata: [DONE]\n\n"
    cut = whole.index(b"b") + 3  # the second event's read ends inside its JSON
    answered = RawResponse(started=10.0, status="200", complete=True)
    answered.add(10.5, whole[:cut])
    answered.add(10.75, whole[cut:])
    unfinished = RawResponse(started=20.0, status="200", complete=True)
    unfinished.add(20.5, token("a") + b"\n\n")  # ends cleanly, but without [DONE]
    target._responses = {0: answered, 1: unfinished}
    records = [RequestRecord(0, 0.0, 0.25, 1.0, "200"), RequestRecord(1, 1.0, 1.0, 2.0, "200")]
    settled, streams = target.finish(records)
    # token times move onto the runner's time base: sent 0.25 s <-> started 10.0
    assert streams[0].token_s == [0.75, 1.0] and streams[0].status == "200"
    assert (streams[0].output_tokens, streams[0].token_source) == (2, "usage")
    assert streams[0].prompt_tokens == 3
    assert [r.status for r in settled] == ["200", "stream_error"]
    assert streams[1].status == "stream_error" and streams[1].token_s == [1.5]
    assert target._responses == {}  # the raw bytes are dropped once parsed


@pytest.mark.timeout(60)
def test_fake_server_with_spin_polls_instead_of_sleeping_and_still_streams() -> None:
    """--spin keeps the server's core busy (its CPU time grows while it has nothing to do),
    which is what keeps it on pace on a VM; the streams it sends are the same."""
    def run(spin: bool) -> tuple[float, RawResponse]:
        proc = subprocess.Popen([sys.executable, "-m", "infertune.loadgen.fake_llmserver",
                                 "--port", "0", "--itl-ms", "1", *(["--spin"] if spin else [])],
                                stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()
            cpu = psutil.Process(proc.pid)
            before = sum(cpu.cpu_times()[:2])
            time.sleep(1.0)  # idle: nothing sent
            idle_cpu = sum(cpu.cpu_times()[:2]) - before

            async def one() -> RawResponse:
                client = StreamClient(url + "v1/chat/completions", timeout_s=10,
                                      clock=time.perf_counter)
                body = json.dumps({"max_tokens": 4, "stream": True}).encode()
                reply = await client.send(client.request_bytes("POST", body), 0.0)
                await client.close()
                return reply

            return idle_cpu, asyncio.run(one())
        finally:
            proc.terminate()
            proc.wait(timeout=20)

    sleeping_cpu, sleeping = run(spin=False)
    spinning_cpu, spinning = run(spin=True)
    for reply in (sleeping, spinning):
        assert reply.status == "200" and reply.complete
        assert reply.body.count(b'" tok"') == 4
    # one idle second: a sleeping loop uses next to no CPU, a polling one a large share of a
    # core (less when the test shares its cores, hence the loose bound)
    assert sleeping_cpu < 0.05 and spinning_cpu > 0.2, (sleeping_cpu, spinning_cpu)
