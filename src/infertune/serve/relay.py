"""ASGI plumbing for the router: driving each release app's lifespan, replaying a buffered
request body into an app (passing its answer on, or capturing it), and merging the releases'
Prometheus registries into one exposition with a ``release`` label on every sample."""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# An ASGI scope key (set in-process only, so no client can send it): the router's replay of a
# canary answer to the stable, for the agreement gate. The release app answers it as usual but
# leaves it out of its latency histograms, so the stable's latency stays its own traffic's.
COMPARISON_REPLAY = "infertune.comparison_replay"


def labelled_exposition(named: Sequence[tuple[str, CollectorRegistry]]) -> bytes:
    """Each registry's text with ``release="NAME"`` on every sample, one group per family
    (the text format wants a family's samples together, under one HELP and TYPE)."""
    return labelled_texts([(name, generate_latest(r).decode()) for name, r in named])


def labelled_texts(named: Sequence[tuple[str, str]], label: str = "release") -> bytes:
    """Exposition texts merged, ``label="NAME"`` added to each text's samples (serve --engine
    ray merges its replicas' router metrics with ``replica``)."""
    families: OrderedDict[str, tuple[list[str], list[str]]] = OrderedDict()
    for name, text in named:
        current = ""
        for line in text.splitlines():
            if line.startswith("# "):
                current = line.split()[2]
                comments, _ = families.setdefault(current, ([], []))
                if len(comments) < 2:
                    comments.append(line)
            elif line:
                families.setdefault(current, ([], []))[1].append(labelled(line, name, label))
    lines = [line for comments, samples in families.values() for line in comments + samples]
    return ("\n".join(lines) + "\n").encode() if lines else b""


class AppLifespan:
    """Drives one release app's ASGI lifespan (its queue, batcher and workers)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.inbox: asyncio.Queue[Message] = asyncio.Queue()
        self.outbox: asyncio.Queue[Message] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
        self.task = asyncio.ensure_future(self.app(scope, self.inbox.get, self.outbox.put))
        await self.inbox.put({"type": "lifespan.startup"})
        reply = await self._reply()
        if reply["type"] != "lifespan.startup.complete":
            raise RuntimeError(reply.get("message") or "a release failed to start")

    async def stop(self) -> None:
        await self.inbox.put({"type": "lifespan.shutdown"})
        await self._reply()
        if self.task is not None:
            await self.task

    async def _reply(self) -> Message:
        assert self.task is not None
        getter = asyncio.ensure_future(self.outbox.get())
        await asyncio.wait({getter, self.task}, return_when=asyncio.FIRST_COMPLETED)
        if getter.done():
            return getter.result()
        getter.cancel()
        error = self.task.exception()
        return {"type": "lifespan.startup.failed", "message": str(error or "app exited")}


def headers_of(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def get_scope(path: str) -> Scope:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
            "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
            "query_string": b"", "headers": [], "client": ("127.0.0.1", 0),
            "server": ("127.0.0.1", 0)}


def labelled(line: str, release: str, label: str = "release") -> str:
    """``name{a="b"} 1`` -> ``name{release="R",a="b"} 1``; ``name 1`` -> ``name{release="R"} 1``."""
    cut = min((i for i in (line.find("{"), line.find(" ")) if i >= 0), default=len(line))
    if line[cut:cut + 1] == "{":
        return f'{line[:cut]}{{{label}="{release}",{line[cut + 1:]}'
    return f'{line[:cut]}{{{label}="{release}"}}{line[cut:]}'


async def read_body(receive: Receive, limit: int) -> bytes | None:
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        more = message.get("more_body", False)
    return b"".join(chunks)


async def call_app(app: ASGIApp, scope: Scope, body: bytes, send: Send | None,
                extra_headers: list[tuple[bytes, bytes]], *, capture: bool,
                disconnect: Receive | None) -> tuple[int, bytes]:
    """Run ``app`` on ``body``; pass its answer to ``send`` (when given) with extra headers,
    and return (status, body when ``capture``)."""
    done = asyncio.Event()
    sent = False
    status, chunks = 0, []

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        if disconnect is not None:
            return await disconnect()
        await done.wait()
        return {"type": "http.disconnect"}

    async def forward(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
            message = {**message, "headers": [*message.get("headers", []), *extra_headers]}
        elif message["type"] == "http.response.body":
            if capture:
                chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                done.set()
        if send is not None:
            await send(message)

    await app(dict(scope), replay, forward)
    done.set()
    return status, b"".join(chunks)


async def respond(send: Send, status: int, body: bytes, content_type: str) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode()),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def respond_json(send: Send, status: int, payload: dict[str, Any]) -> None:
    await respond(send, status, json.dumps(payload).encode(), "application/json")


async def respond_error(send: Send, status: int, message: str) -> None:
    """The serving app's error shape: ``{"error": "one line"}``."""
    await respond_json(send, status, {"error": message})
