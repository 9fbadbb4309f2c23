"""The ASGI app: routes, request limits, the API-key guard and the Server-Timing header.

    create_app(adapter, policy) -> Starlette    serve it with uvicorn

Routes: POST /v1/predict, GET /healthz, GET /readyz, GET /metrics, GET /v1/model,
POST /v1/cache/purge, GET /openapi.json. With ``policy.api_key_env`` set, every route but
/healthz and /readyz needs the key (``X-API-Key: KEY`` or ``Authorization: Bearer KEY``).
Every answer is JSON ``{"error": "one line"}`` on failure and carries ``Server-Timing`` with the
queue, preprocess, inference and postprocess durations in milliseconds (0 for a stage the
request did not go through).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from infertune.config import ServePolicy
from infertune.errors import ConfigError
from infertune.models.base import Adapter
from infertune.serve.batcher import BatchFailed
from infertune.serve.metrics import STAGES, ServeMetrics
from infertune.serve.openapi import openapi_schema
from infertune.serve.queue import Rejected
from infertune.serve.runtime import ServeRuntime
from infertune.serve.validate import BadRequest, check_inputs, parse_predict, parse_purge
from infertune.serve.warmup import prime_on_this_thread

log = logging.getLogger("infertune.serve")
OPEN_PATHS = frozenset({"/healthz", "/readyz"})


def server_timing(timings: Mapping[str, float]) -> str:
    """``queue;dur=X, preprocess;dur=X, inference;dur=X, postprocess;dur=X`` in ms."""
    return ", ".join(f"{stage};dur={timings.get(stage, 0.0) * 1000:.3f}" for stage in STAGES)


def create_app(adapter: Adapter, policy: ServePolicy | None = None, *,
               clock: Callable[[], float] = time.monotonic, registry: Any = None,
               redis: Any = None, fast_adapter: Adapter | None = None,
               environ: Mapping[str, str] | None = None) -> Starlette:
    """The serving app for ``adapter`` (with ``policy.warmup``, one small forward runs on the
    calling thread first: see warmup.prime_on_this_thread). ``registry``: a prometheus
    CollectorRegistry (a new one by default); ``redis``: a redis.asyncio client (else one from
    ``policy.redis_url``); ``fast_adapter``: the cascade's fast model; ``environ``: where the
    API key is read (os.environ by default)."""
    policy = policy or ServePolicy()
    if policy.warmup:
        prime_on_this_thread(adapter)
        if fast_adapter is not None:
            prime_on_this_thread(fast_adapter)
    metrics = ServeMetrics(registry)
    runtime = ServeRuntime(adapter, policy, clock=clock, metrics=metrics, redis=redis,
                           fast_adapter=fast_adapter)
    api_key = _api_key(policy, os.environ if environ is None else environ)
    handlers = _Handlers(runtime, policy, clock)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await runtime.start()
        try:
            yield
        finally:
            await runtime.stop()

    routes = [
        Route("/v1/predict", handlers.predict, methods=["POST"]),
        Route("/healthz", handlers.healthz, methods=["GET"]),
        Route("/readyz", handlers.readyz, methods=["GET"]),
        Route("/metrics", handlers.metrics, methods=["GET"]),
        Route("/v1/model", handlers.model, methods=["GET"]),
        Route("/v1/cache/purge", handlers.purge, methods=["POST"]),
        Route("/openapi.json", handlers.openapi, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    middleware=[Middleware(GuardMiddleware, api_key=api_key)])
    app.state.runtime = runtime
    app.state.metrics = metrics
    return app


def _api_key(policy: ServePolicy, environ: Mapping[str, str]) -> str | None:
    if not policy.api_key_env:
        return None
    key = environ.get(policy.api_key_env, "")
    if not key:
        raise ConfigError(f"api_key_env names {policy.api_key_env!r} but it is not set or empty; "
                          f"export {policy.api_key_env}=<key> or drop api_key_env")
    return key


def _error(status: int, message: str, timings: Mapping[str, float] | None = None,
           headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status,
                        headers={"Server-Timing": server_timing(timings or {}), **(headers or {})})


class _Handlers:
    def __init__(self, runtime: ServeRuntime, policy: ServePolicy,
                 clock: Callable[[], float]) -> None:
        self.runtime = runtime
        self.policy = policy
        self.clock = clock
        self.manifest = _manifest(runtime.adapter)

    async def predict(self, request: Request) -> Response:
        arrived = self.clock()
        m = self.runtime.metrics
        m.in_flight.inc()
        response: Response = _error(500, "internal error")
        try:
            response = await self._predict(request, arrived)
        finally:
            m.in_flight.dec()
            m.requests.labels(status=str(response.status_code)).inc()
            m.request_seconds.observe(self.clock() - arrived)
        return response

    async def _predict(self, request: Request, arrived: float) -> Response:
        m = self.runtime.metrics
        try:
            body = await _read_limited(request, self.policy.max_request_bytes)
            req = parse_predict(body, self.policy)
            check_inputs(req.inputs, self.runtime.adapter, self.policy)
            result = await self.runtime.predict(req, arrived)
        except BadRequest as exc:
            m.errors.labels(type="invalid_request").inc()
            return _error(exc.status, str(exc))
        except Rejected as exc:
            retry = {"Retry-After": str(int(exc.retry_after_s))} if exc.retry_after_s else {}
            return _error(exc.status, str(exc), headers=retry)
        except BatchFailed as exc:
            return _error(500, str(exc))
        except Exception as exc:  # noqa: BLE001 - one bad request must not take the server down
            log.exception("predict failed")
            m.errors.labels(type=f"internal_{type(exc).__name__}").inc()
            return _error(500, f"internal error: {type(exc).__name__}; see the server log")
        body_out = {"outputs": result.outputs, "model": self.runtime.model,
                    "cached": result.cached}
        return JSONResponse(body_out, headers={"Server-Timing": server_timing(result.timings)})

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "alive"})

    async def readyz(self, request: Request) -> Response:
        if self.runtime.ready:
            return JSONResponse({"status": "ready", "model": self.runtime.model})
        reason = self.runtime.warmup_error or "warming up"
        return _error(503, reason)

    async def metrics(self, request: Request) -> Response:
        return Response(self.runtime.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    async def model(self, request: Request) -> Response:
        return JSONResponse(self.manifest)

    async def purge(self, request: Request) -> Response:
        try:
            layer = parse_purge(await _read_limited(request, 4096))
        except BadRequest as exc:
            return _error(exc.status, str(exc))
        assert self.runtime.cache is not None
        return JSONResponse({"purged": await self.runtime.cache.purge(layer)})

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_schema())


def _manifest(adapter: Adapter) -> dict[str, Any]:
    """The variant's manifest.json when the model came from a variant folder, else ModelInfo."""
    source = Path(adapter.info.source) if adapter.info.source else None
    if source is not None and (source / "manifest.json").is_file():
        try:
            return json.loads((source / "manifest.json").read_text())
        except (OSError, json.JSONDecodeError):
            log.warning("cannot read %s/manifest.json; showing model info", source)
    return adapter.info.to_dict()


async def _read_limited(request: Request, limit: int) -> bytes:
    """The body, refusing (413) anything over ``limit`` bytes before reading all of it."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"request body is {int(declared)} bytes; the limit is {limit}; "
                         "send fewer or shorter inputs")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"request body is over the {limit}-byte limit; send fewer or "
                             "shorter inputs")
        chunks.append(chunk)
    return b"".join(chunks)


class GuardMiddleware:
    """API-key check on every route but health, and a Server-Timing header on every answer
    (zeros where a route ran no model stage), as pure ASGI so streaming is untouched."""

    def __init__(self, app: ASGIApp, api_key: str | None) -> None:
        self.app = app
        self.api_key = api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.api_key and scope["path"] not in OPEN_PATHS and not self._authorised(scope):
            response = _error(401, "missing or wrong API key; send X-API-Key: <key> or "
                              "Authorization: Bearer <key>")
            await response(scope, receive, send)
            return

        async def send_with_timing(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(name.lower() == b"server-timing" for name, _ in headers):
                    headers.append((b"server-timing", server_timing({}).encode()))
                    message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_timing)

    def _authorised(self, scope: Scope) -> bool:
        assert self.api_key is not None
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        given = headers.get(b"x-api-key", b"").decode("latin-1")
        bearer = headers.get(b"authorization", b"").decode("latin-1")
        if bearer.lower().startswith("bearer "):
            given = given or bearer[7:].strip()
        return bool(given) and hmac.compare_digest(given.encode(), self.api_key.encode())
