"""A scripted server-sent-events server on 127.0.0.1 for the streaming target's unit tests:
each POST is answered by a Script (status, events with a delay before each, whether the stream
ends with [DONE]), so tests know exactly what the client should have measured."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Event:
    delay_s: float  # wait before sending it
    data: Any  # a JSON value, or raw text sent as is


@dataclass
class Script:
    status: int = 200
    events: list[Event] = field(default_factory=list)
    done: bool = True  # send "data: [DONE]" at the end
    cut: bool = False  # drop the connection after the events (no clean end)


def chat_tokens(texts: list[str], gap_s: float, first_s: float, usage: int | None = None,
                timing: dict[str, Any] | None = None) -> list[Event]:
    """Chat-completion chunks, one per text, the first after ``first_s``, then every gap_s."""
    events = [Event(first_s if i == 0 else gap_s,
                    {"choices": [{"index": 0, "delta": {"content": t}}]})
              for i, t in enumerate(texts)]
    tail: dict[str, Any] = {"choices": []}
    if usage is not None:
        tail["usage"] = {"prompt_tokens": 7, "completion_tokens": usage}
    if timing is not None:
        tail["infertune_timing"] = timing
    return [*events, Event(0.0, tail)]


class ScriptedSSE:
    """``with ScriptedSSE(lambda n, body: Script(...)) as url:`` (n counts requests from 0)."""

    def __init__(self, script: Callable[[int, Any], Script]) -> None:
        self.script = script
        self.bodies: list[Any] = []
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> str:
        self._thread.start()
        if not self._ready.wait(timeout=10):
            raise RuntimeError("scripted SSE server did not start")
        return self.url

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        n = len(self.bodies)
        self.bodies.append(body)
        script = self.script(n, body)
        if script.status != 200:
            return web.json_response({"error": {"message": "scripted"}}, status=script.status)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for event in script.events:
            if event.delay_s:
                await asyncio.sleep(event.delay_s)
            text = event.data if isinstance(event.data, str) else json.dumps(event.data)
            await resp.write(f"data: {text}\n\n".encode())
        if script.cut:
            assert request.transport is not None
            request.transport.close()
            return resp
        if script.done:
            await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/v1/chat/completions"
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(runner.cleanup())
            loop.close()
