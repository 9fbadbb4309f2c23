"""A minimal HTTP/1.1 client for streamed responses, on asyncio's Protocol API, made for the
streaming load generator: while a response streams in, the client does nothing but note the
clock and keep the bytes. Parsing server-sent events and JSON happens after the run
(openai.py), so a send that falls due never waits behind a burst of token parsing.

Per network read, ``data_received`` takes one clock reading (the token's arrival time, exact to
the read), strips the transfer framing (Content-Length, chunked, or read-until-close) and
appends ``(time, body bytes)``: a handful of byte operations, where aiohttp's reader adds its
StreamReader, a future and a task wake-up per read, and the JSON parse of each event.
benchmarks/llm_loadgen_capacity.py measures the client's CPU per token with both readers side
by side.

Connections are kept alive and reused; a reused connection that the server had closed while
idle (its keep-alive timeout) is retried once on a new connection. Every failure becomes a
status on the RawResponse (``connection_error``, ``timeout``, ``stream_error``: the connection
was lost mid-body, ``error``: not HTTP), never an exception. The bytes of every streamed body
are kept until the caller drops the response: about 150 bytes per token for OpenAI-style
events, so a 10-minute run at 5,000 tokens/s holds ~450 MB.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from infertune.errors import ConfigError

Clock = Callable[[], float]
MAX_HEAD_BYTES = 65536  # a status line and headers longer than this are not a server's answer


@dataclass
class RawResponse:
    """One request's answer as it arrived. ``status`` is the HTTP code as text, or what went
    wrong; ``pieces`` hold the body, transfer framing removed, and ``times`` the clock reading
    of the network read that brought each piece. Two flat lists rather than one list of
    (time, bytes) pairs: floats and bytes are not tracked by the garbage collector and a tuple
    is, so a long run keeps no tracked object per token and its collections stay short."""

    started: float
    status: str = "connection_error"
    headers: dict[str, str] = field(default_factory=dict)  # names lower-cased
    times: list[float] = field(default_factory=list)
    pieces: list[bytes] = field(default_factory=list)
    complete: bool = False  # the body ended as its framing said (not cut, not timed out)
    done: float = 0.0

    def add(self, now: float, piece: bytes) -> None:
        self.times.append(now)
        self.pieces.append(piece)

    @property
    def chunks(self) -> list[tuple[float, bytes]]:
        """(read time, body bytes) per read, in order."""
        return list(zip(self.times, self.pieces, strict=True))

    @property
    def body(self) -> bytes:
        return b"".join(self.pieces)


# Where a connection is in the answer. Plain ints, not an Enum: they are compared on every
# network read, and a global int costs less than an enum attribute lookup.
HEAD = 1  # reading the status line and headers
LENGTH = 2  # Content-Length bytes
CHUNK_SIZE = 3  # the size line of the next chunk
CHUNK_DATA = 4  # inside a chunk (its data, then its CRLF)
TRAILER = 5  # after the last chunk: trailer lines up to a blank one
UNTIL_CLOSE = 6  # no framing: the body ends when the server closes


class _Connection(asyncio.Protocol):
    """One keep-alive TCP connection, answering one request at a time."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reusable = False
        self._response: RawResponse | None = None
        self._finished: asyncio.Future[None] | None = None
        self._state = HEAD
        self._buffer = b""
        self._left = 0  # bytes left in a LENGTH body or in the current chunk (data + CRLF)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def start(self, request: bytes, response: RawResponse) -> asyncio.Future[None]:
        assert self.transport is not None
        self._response, self._state, self._buffer = response, HEAD, b""
        self._finished = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self._finished

    def data_received(self, data: bytes) -> None:
        now = self.clock()
        response = self._response
        if response is None:  # bytes nobody asked for: this connection cannot be trusted
            self.close()
            return
        if self._state == HEAD:
            data = self._head(self._buffer + data, response)
            if self._state == HEAD or self._response is None:
                return
        if self._state == LENGTH:
            piece = data[:self._left]
            self._left -= len(piece)
            if piece:  # the read that ended the headers may hold no body yet
                response.add(now, piece)
            if self._left == 0:
                self._finish(complete=True)
        elif self._state == UNTIL_CLOSE:
            if data:
                response.add(now, data)
        else:
            self._chunked(data, now, response)

    def _head(self, data: bytes, response: RawResponse) -> bytes:
        """Parse the status line and headers once they are all in; the rest of ``data``."""
        end = data.find(b"\r\n\r\n")
        if end < 0:
            if len(data) > MAX_HEAD_BYTES:
                self._fail("error")
            self._buffer = data
            return b""
        head, rest = data[:end].decode("latin-1"), data[end + 4:]
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            self._fail("error")
            return b""
        if parts[1].startswith("1"):  # 100 Continue and the like: the answer follows
            return self._head(rest, response)
        response.status = parts[1]
        for line in lines[1:]:
            name, _, value = line.partition(":")
            response.headers[name.strip().lower()] = value.strip()
        connection = response.headers.get("connection", "").lower()
        self.reusable = parts[0] == "HTTP/1.1" and connection != "close"
        self._buffer = b""
        if response.headers.get("transfer-encoding", "").lower().endswith("chunked"):
            self._state = CHUNK_SIZE
        elif "content-length" in response.headers:
            try:
                self._left = int(response.headers["content-length"])
            except ValueError:
                self._fail("error")
                return b""
            self._state = LENGTH
            if self._left == 0 or parts[1] in ("204", "304"):
                self._finish(complete=True)
        elif parts[1] in ("204", "304"):
            self._finish(complete=True)
        else:
            self._state, self.reusable = UNTIL_CLOSE, False
        return rest

    def _chunked(self, data: bytes, now: float, response: RawResponse) -> None:
        """Strip chunked framing from ``data``: the chunks whole in this read are taken in one
        step each, and all the body bytes of one read become one entry (they share its time)."""
        if self._buffer:
            data, self._buffer = self._buffer + data, b""
        body: list[bytes] = []
        pos, n = 0, len(data)
        while pos < n:
            if self._state == CHUNK_DATA:
                left = self._left  # the chunk's data, then its closing CRLF
                take = min(left, n - pos)
                keep = min(take, left - 2)  # CRLF bytes are framing, not body
                if keep > 0:
                    body.append(data[pos:pos + keep])
                pos, self._left = pos + take, left - take
                if self._left == 0:
                    self._state = CHUNK_SIZE
                continue
            end = data.find(b"\r\n", pos)
            if end < 0:
                self._buffer = data[pos:]
                break
            line, pos = data[pos:end], end + 2
            if self._state == TRAILER:
                if not line:
                    self._keep(response, now, body)
                    self._finish(complete=True)
                    return
                continue
            try:
                size = int(line.split(b";", 1)[0], 16)
            except ValueError:
                self._fail("stream_error")
                return
            if size == 0:
                self._state = TRAILER
            elif pos + size + 2 <= n:  # the whole chunk is here: the usual case
                body.append(data[pos:pos + size])
                pos += size + 2
            else:
                self._state, self._left = CHUNK_DATA, size + 2
        self._keep(response, now, body)

    @staticmethod
    def _keep(response: RawResponse, now: float, body: list[bytes]) -> None:
        if body:
            response.add(now, body[0] if len(body) == 1 else b"".join(body))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._response is None:
            return
        if self._state == UNTIL_CLOSE:
            self._finish(complete=True)
        else:
            self._fail("connection_error" if self._state == HEAD else "stream_error")

    def timed_out(self) -> None:
        if self._response is not None:
            self._fail("timeout")

    def _fail(self, status: str) -> None:
        if self._response is not None:
            self._response.status = status
        self._finish(complete=False)
        self.close()

    def _finish(self, *, complete: bool) -> None:
        response, finished = self._response, self._finished
        self._response = self._finished = None
        if response is not None:
            response.complete, response.done = complete, self.clock()
        if finished is not None and not finished.done():
            finished.set_result(None)
        if not complete:
            self.reusable = False

    def close(self) -> None:
        self.closed, self.reusable = True, False
        if self.transport is not None:
            self.transport.close()


class StreamClient:
    """Requests to one origin over a pool of keep-alive connections (no cap on their number:
    an open-loop client must not queue requests behind a connection limit)."""

    def __init__(self, url: str, *, timeout_s: float, clock: Clock) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"target {url!r} is not an http(s) URL; write it like "
                              "http://127.0.0.1:8000/v1/chat/completions")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.authority = parts.netloc
        self.ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self.timeout_s, self.clock = timeout_s, clock
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()

    def request_bytes(self, method: str, body: bytes | None = None, *, path: str | None = None,
                      headers: dict[str, str] | None = None) -> bytes:
        """The whole request, encoded once so that a send is one socket write."""
        lines = [f"{method} {path or self.path} HTTP/1.1", f"Host: {self.authority}",
                 "User-Agent: infertune-loadgen"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")

    async def send(self, request: bytes, started: float) -> RawResponse:
        """Send ``request`` (from request_bytes) and wait for its whole answer."""
        response = RawResponse(started=started)
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                await self._exchange(connection, request, response, deadline)
                if response.status != "connection_error" or response.pieces:
                    return response
                response = RawResponse(started=started)  # closed while idle: once more, anew
                break
        try:
            async with asyncio.timeout_at(deadline):
                connection = await self._connect()
        except (OSError, TimeoutError) as exc:
            response.status = "timeout" if isinstance(exc, TimeoutError) else "connection_error"
            response.done = self.clock()
            return response
        await self._exchange(connection, request, response, deadline)
        return response

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_connection(
            lambda: _Connection(self.clock), self.host, self.port, ssl=self.ssl)
        self._all.add(connection)
        return connection

    async def _exchange(self, connection: _Connection, request: bytes, response: RawResponse,
                        deadline: float) -> None:
        loop = asyncio.get_running_loop()
        timer = loop.call_at(deadline, connection.timed_out)
        try:
            await connection.start(request, response)
        finally:
            timer.cancel()
        if connection.reusable and not connection.closed:
            self._idle.append(connection)
        else:
            self._all.discard(connection)
            connection.close()

    async def close(self) -> None:
        for connection in self._all:
            connection.close()
        self._all.clear()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports run their close callbacks
