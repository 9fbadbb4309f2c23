"""Targets a load test sends to. A Target has ``open()``, ``send(index) -> Reply`` and
``close()``; ``send`` never raises for a failed request: it returns a Reply whose status says
what happened ("connection_error", "timeout", "error" or the HTTP code), so one dead server
produces a result full of connection errors instead of a crash.

    HttpTarget        an HTTP(S) URL; GET, or POST of JSON bodies taken round-robin
    InProcessTarget   an Adapter behind serve's runtime in this process (inprocess.py)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import aiohttp

from infertune.errors import ConfigError, DataError
from infertune.jsonfile import read_jsonl
from infertune.loadgen.result import parse_server_timing


@dataclass
class Reply:
    status: str
    server_timing_ms: dict[str, float] = field(default_factory=dict)


class Target(Protocol):
    name: str

    async def open(self) -> None: ...

    async def send(self, index: int) -> Reply: ...

    async def close(self) -> None: ...


def load_bodies(path: str | Path) -> list[Any]:
    """JSON values, one per non-empty line of a JSON Lines file."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"body file {path} not found; pass --body-file with a .jsonl file")
    bodies = [body for _, body in read_jsonl(path, fix="write one JSON value per line",
                                             error=DataError)]
    if not bodies:
        raise DataError(f"{path}: no request bodies; the file is empty")
    return bodies


class HttpTarget:
    """An HTTP endpoint through aiohttp (one pooled session, no connection cap by default).

    The response body is read in full so the latency covers the whole answer."""

    def __init__(self, url: str, *, method: Literal["GET", "POST"] | None = None,
                 bodies: list[Any] | None = None, timeout_s: float = 30.0,
                 max_connections: int = 0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"target {url!r} is not an http(s) URL; write it like "
                              "http://127.0.0.1:8000/predict")
        self.name = url
        self.url = url
        self.method = method or ("POST" if bodies else "GET")
        if self.method == "POST" and not bodies:
            raise ConfigError("POST needs request bodies; pass --body-file with a .jsonl file")
        # Encode once: a load generator should not spend its time in json.dumps.
        self._payloads = [json.dumps(b).encode() for b in (bodies or [])]
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        self._session: Any = None

    async def open(self) -> None:
        connector = aiohttp.TCPConnector(limit=self.max_connections, force_close=False)
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout)

    async def send(self, index: int) -> Reply:
        kwargs: dict[str, Any] = {}
        if self._payloads:
            kwargs["data"] = self._payloads[index % len(self._payloads)]
            kwargs["headers"] = {"Content-Type": "application/json"}
        try:
            async with self._session.request(self.method, self.url, **kwargs) as resp:
                await resp.read()
                timing = parse_server_timing(resp.headers.get("Server-Timing"))
                return Reply(str(resp.status), timing)
        except TimeoutError:
            return Reply("timeout")
        except aiohttp.ClientConnectionError:
            # Refused, reset, DNS failure, server hung up: the request got no answer.
            return Reply("connection_error")
        except aiohttp.ClientError:
            return Reply("error")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

