"""A fake OpenAI-compatible streaming server: a load source for the load generator's own
capacity benchmark (benchmarks/llm_loadgen_capacity.py), not a model server. It runs no model
and computes nothing: every stream sends one fixed, pre-encoded token per ``itl_ms`` on a
timer, so a token costs the server one timer callback and one socket write (33 us of CPU per
token with 64-token streams, measured on a shared 2-core AMD EPYC under load: about what the
client spends reading it, so on two cores the server may be what runs out first, and the
benchmark says so instead of blaming the client).

    python -m infertune.loadgen.fake_llmserver --port 0 --itl-ms 10   (prints the URL)
    python -m infertune.loadgen.llmserver --fake --synthetic-itl-ms 10  (the same server)

It speaks just enough HTTP/1.1 on asyncio's Protocol API (keep-alive, Content-Length request
bodies, chunked responses): POST /v1/chat/completions and /v1/completions (``stream`` true or
false, ``max_tokens``, ``stream_options.include_usage``), GET /v1/models and /health. A bad
request gets a 400 with a one-line JSON error and the connection stays usable.

Each stream's token k is due at arrival + ``ttft_ms`` + k x ``itl_ms`` (timers on precise_loop's
event loop, to the microsecond): a server that falls behind sends late, it does not stretch the
schedule. With ``--lockstep`` all streams step together instead, one token each every
``itl_ms``, new streams joining at the next step, as a continuous-batching engine (vLLM, TGI)
emits one token per running sequence per decode step: the client then gets its tokens in bursts
of as many reads as there are streams, its hardest case.

With ``--spin`` the event loop never sleeps: it polls its sockets and timers in a tight loop.
On a virtual machine a core that went idle wakes late (a bare 0.2-3 ms timer sleep woke 0.6-4 ms
late, p99, on a 2-core AMD EPYC VM in session 4), so a server that sleeps between tokens falls
behind its own schedule there and the benchmark would stop, blaming the server, before the
client is judged. The benchmark runs the server on a core of its own, so the spinning costs
nothing the client needs.

Its own timings go out in the last event as ``infertune_timing`` (ttft_ms, e2e_ms and gaps_ms,
from the request's arrival to each write), like llmserver's, so a benchmark can show that the
server kept its pace.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass, field

from infertune.loadgen.precise_loop import new_precise_loop

MODEL_ID = "infertune-fake-llm"
TOKEN = " tok"
MAX_BODY_BYTES = 1 << 20


@dataclass(frozen=True)
class FakeConfig:
    itl_ms: float = 10.0
    ttft_ms: float = 0.0
    lockstep: bool = False
    spin: bool = False  # poll instead of sleeping (see the module docstring)

    def __post_init__(self) -> None:
        if not self.itl_ms >= 0 or not self.ttft_ms >= 0:
            raise ValueError("--itl-ms and --ttft-ms must be >= 0")
        if self.lockstep and not self.itl_ms > 0:
            raise ValueError("--lockstep needs --itl-ms > 0 (the step period)")


def _framed(payload: bytes) -> bytes:
    """One chunk of a chunked HTTP body."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(data: dict[str, object]) -> bytes:
    return _framed(b"data: " + json.dumps(data).encode() + b"\n\n")


# Encoded once: the fake server's cost per token is one socket write of these bytes.
CHUNKS = {
    True: _event({"id": "fake", "object": "chat.completion.chunk", "model": MODEL_ID,
                  "choices": [{"index": 0, "delta": {"content": TOKEN}}]}),
    False: _event({"id": "fake", "object": "text_completion", "model": MODEL_ID,
                   "choices": [{"index": 0, "text": TOKEN}]}),
}
DONE = _framed(b"data: [DONE]\n\n") + b"0\r\n\r\n"
STREAM_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache"
               b"\r\nTransfer-Encoding: chunked\r\n\r\n")


class BadRequest(ValueError):
    """Answered 400 with its message."""


@dataclass
class _Stream:
    arrival: float
    chat: bool
    max_tokens: int
    usage: bool
    prompt_tokens: int
    sent: int = 0
    writes: list[float] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class Lockstep:
    """One step every ``itl_s`` that sends a token on every streaming connection."""

    def __init__(self, itl_s: float) -> None:
        self.itl_s = itl_s
        self.members: dict[FakeProtocol, None] = {}  # insertion-ordered set
        self._timer: asyncio.TimerHandle | None = None
        self._next = 0.0

    def join(self, member: FakeProtocol) -> None:
        self.members[member] = None
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._next = loop.time() + self.itl_s
            self._timer = loop.call_at(self._next, self._step)

    def leave(self, member: FakeProtocol) -> None:
        self.members.pop(member, None)

    def _step(self) -> None:
        for member in list(self.members):
            member.tick()
        if not self.members:
            self._timer = None
            return
        loop = asyncio.get_running_loop()
        self._next = max(self._next + self.itl_s, loop.time())  # behind: no burst to catch up
        self._timer = loop.call_at(self._next, self._step)


class FakeProtocol(asyncio.Protocol):
    """One client connection: requests are answered one after another (HTTP/1.1 keep-alive)."""

    def __init__(self, config: FakeConfig, lockstep: Lockstep | None = None) -> None:
        self.config = config
        self.lockstep = lockstep
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.stream: _Stream | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self.stream is not None and self.stream.timer is not None:
            self.stream.timer.cancel()
        if self.lockstep is not None:
            self.lockstep.leave(self)
        self.stream, self.transport = None, None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self.stream is None and self.transport is not None and self._one_request():
            pass

    def _one_request(self) -> bool:
        """Answer the first complete request in the buffer; False when none is complete."""
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_BODY_BYTES:
                self._reply(431, {"error": {"message": "request head too large"}}, close=True)
            return False
        lines = self.buffer[:end].decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip()
                   for k, _, v in (line.partition(":") for line in lines[1:])}
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            self._reply(400, {"error": {"message": "bad Content-Length"}}, close=True)
            return False
        if length > MAX_BODY_BYTES or "chunked" in headers.get("transfer-encoding", ""):
            self._reply(413, {"error": {"message": "send a Content-Length body under 1 MiB"}},
                        close=True)
            return False
        if len(self.buffer) < end + 4 + length:
            return False
        body = self.buffer[end + 4:end + 4 + length]
        self.buffer = self.buffer[end + 4 + length:]
        method, _, rest = lines[0].partition(" ")
        self._route(method, rest.split(" ", 1)[0], body)
        return True

    def _route(self, method: str, path: str, body: bytes) -> None:
        arrival = time.perf_counter()
        if method == "GET" and path == "/v1/models":
            self._reply(200, {"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]})
        elif method == "GET" and path == "/health":
            self._reply(200, {"ok": True})
        elif method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            try:
                self._start(arrival, path.endswith("chat/completions"), body)
            except BadRequest as exc:
                self._reply(400, {"error": {"message": str(exc),
                                            "type": "invalid_request_error"}})
        else:
            self._reply(404, {"error": {"message": f"no route {method} {path}"}})

    def _start(self, arrival: float, chat: bool, raw: bytes) -> None:
        try:
            body = json.loads(raw)
        except ValueError:
            raise BadRequest("the body is not valid JSON") from None
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens", 16))
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise BadRequest(f"'max_tokens' must be an integer >= 1, got {max_tokens!r}")
        options = body.get("stream_options")
        stream = _Stream(arrival, chat, max_tokens, usage=isinstance(options, dict)
                         and options.get("include_usage") is True, prompt_tokens=len(raw))
        if body.get("stream") is not True:
            text = TOKEN * max_tokens
            choice = ({"index": 0, "message": {"role": "assistant", "content": text}}
                      if chat else {"index": 0, "text": text})
            self._reply(200, {"id": "fake", "model": MODEL_ID, "choices": [choice],
                              "usage": self._usage(stream)})
            return
        assert self.transport is not None
        self.stream = stream
        self.transport.write(STREAM_HEAD)
        self._schedule(stream)

    def _schedule(self, stream: _Stream) -> None:
        if self.lockstep is not None:
            self.lockstep.join(self)  # the next step sends its first token
            return
        due = stream.arrival + (self.config.ttft_ms + stream.sent * self.config.itl_ms) / 1e3
        # due is on perf_counter's clock; the timer takes the loop's, so pass the delay across
        loop = asyncio.get_running_loop()
        stream.timer = loop.call_at(loop.time() + (due - time.perf_counter()), self.tick)

    def tick(self) -> None:
        """Send the stream's next token (and its end after the last one)."""
        stream, transport = self.stream, self.transport
        if stream is None or transport is None:
            return
        stream.writes.append(time.perf_counter())
        transport.write(CHUNKS[stream.chat])
        stream.sent += 1
        if stream.sent < stream.max_tokens:
            if self.lockstep is None:
                self._schedule(stream)
            return
        if self.lockstep is not None:
            self.lockstep.leave(self)
        last: dict[str, object] = {"id": "fake", "model": MODEL_ID, "choices": [],
                                   "infertune_timing": self._timing(stream)}
        if stream.usage:
            last["usage"] = self._usage(stream)
        transport.write(_event(last) + DONE)
        self.stream = None
        if self.buffer:  # a request sent while this one streamed
            self.data_received(b"")

    @staticmethod
    def _usage(stream: _Stream) -> dict[str, int]:
        return {"prompt_tokens": stream.prompt_tokens, "completion_tokens": stream.max_tokens,
                "total_tokens": stream.prompt_tokens + stream.max_tokens}

    @staticmethod
    def _timing(stream: _Stream) -> dict[str, object]:
        w = stream.writes
        return {"ttft_ms": (w[0] - stream.arrival) * 1e3,
                "e2e_ms": (time.perf_counter() - stream.arrival) * 1e3,
                "gaps_ms": [round((b - a) * 1e3, 4) for a, b in zip(w, w[1:], strict=False)]}

    def _reply(self, status: int, data: dict[str, object], close: bool = False) -> None:
        if self.transport is None:
            return
        body = json.dumps(data).encode()
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 413: "Payload Too Large",
                  431: "Request Header Fields Too Large"}[status]
        connection = "Connection: close\r\n" if close else ""
        head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n{connection}\r\n").encode()
        self.transport.write(head + body)
        if close:
            self.buffer = b""
            self.transport.close()


async def serve(config: FakeConfig, port: int) -> None:
    loop = asyncio.get_running_loop()
    lockstep = Lockstep(config.itl_ms / 1e3) if config.lockstep else None
    # a deep accept queue: a load source must not refuse the client's burst of new streams
    server = await loop.create_server(lambda: FakeProtocol(config, lockstep), "127.0.0.1",
                                      port, backlog=4096)
    bound = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{bound}/", flush=True)
    spinner = asyncio.create_task(_spin()) if config.spin else None
    async with server:
        await server.serve_forever()
    if spinner is not None:
        spinner.cancel()


async def _spin() -> None:
    """Keep the loop polling: with a callback always ready, asyncio waits on its sockets with a
    zero timeout and checks its timers on every turn, so the core never idles."""
    while True:
        await asyncio.sleep(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--itl-ms", type=float, default=10.0, help="one token per this many ms")
    parser.add_argument("--ttft-ms", type=float, default=0.0, help="first token after this")
    parser.add_argument("--lockstep", action="store_true",
                        help="all streams send a token at the same steps (continuous batching)")
    parser.add_argument("--spin", action="store_true",
                        help="poll instead of sleeping, so tokens go out on time on a VM "
                             "(uses its whole core)")
    args = parser.parse_args(argv)
    try:
        config = FakeConfig(itl_ms=args.itl_ms, ttft_ms=args.ttft_ms, lockstep=args.lockstep,
                            spin=args.spin)
    except ValueError as exc:
        parser.error(str(exc))
    with asyncio.Runner(loop_factory=new_precise_loop) as runner:
        try:
            runner.run(serve(config, args.port))
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
