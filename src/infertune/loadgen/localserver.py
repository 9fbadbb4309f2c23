"""A tiny HTTP server on 127.0.0.1 (aiohttp) for calibrating the load generator and testing it:
answers at once with a small JSON body and a Server-Timing header, or after a delay chosen by a
function of the time since its first request (to stage a stall).

In a background thread:   ``with LocalServer(delay=...) as url: ...``
As its own process:       ``python -m infertune.loadgen.localserver --port 0`` (prints the URL)
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

DelayFn = Callable[[float], float]  # seconds since the first request -> seconds to hold


def _app(delay: DelayFn | None, clock: Callable[[], float]) -> Any:
    first: list[float] = []

    async def handle(request: web.Request) -> web.Response:
        now = clock()
        if not first:
            first.append(now)
        if request.can_read_body:
            await request.read()
        hold = delay(now - first[0]) if delay is not None else 0.0
        if hold > 0:
            await asyncio.sleep(hold)
        return web.Response(text='{"ok":true}', content_type="application/json",
                            headers={"Server-Timing": f"queue;dur={hold * 1000:.3f}, "
                                                      "inference;dur=0"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


class LocalServer:
    """Runs the server on its own event loop in a daemon thread; the URL is ready on enter."""

    def __init__(self, delay: DelayFn | None = None, host: str = "127.0.0.1", port: int = 0,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        if host not in ("127.0.0.1", "::1", "localhost"):
            raise ValueError("LocalServer binds loopback addresses only")
        self.delay, self.host, self.port, self.clock = delay, host, port, clock
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._runner: Any = None

    def __enter__(self) -> str:
        self._thread = threading.Thread(target=self._serve, name="infertune-localserver",
                                        daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout=10):
            raise RuntimeError("local test server did not start within 10 s")
        return self.url

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        runner = web.AppRunner(_app(self.delay, self.clock), access_log=None)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, self.host, self.port)
        loop.run_until_complete(site.start())
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://{self.host}:{port}/"
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(runner.cleanup())
            loop.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()

    asyncio.run(serve_forever(_app(None, time.perf_counter), args.port))


async def serve_forever(app: Any, port: int) -> None:
    """Serve ``app`` on 127.0.0.1:``port`` (0: any free port), print its URL, run until
    killed (the entry point of the test servers run as their own process)."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"http://127.0.0.1:{bound}/", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    main()
