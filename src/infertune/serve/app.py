"""The ASGI app: routes, request limits, the API-key guard and the Server-Timing header.

    create_app(adapter, policy) -> Starlette    serve it with uvicorn

Routes: POST /v1/predict, GET /healthz, GET /readyz, GET /metrics, GET /v1/model,
POST /v1/cache/purge, GET /openapi.json. With ``policy.api_key_env`` set, every route but
/healthz and /readyz needs the key (``X-API-Key: KEY`` or ``Authorization: Bearer KEY``).
Admin routes (openapi.ADMIN_PATHS) always need it: with no key configured they answer 403.
Every answer is JSON ``{"error": "one line"}`` on failure (404 and 405 included) and carries
``Server-Timing`` with the queue, preprocess, inference and postprocess durations in
milliseconds (0 for a stage the request did not go through). No answer carries a path on the
server's disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from infertune.config import ServePolicy
from infertune.errors import ConfigError
from infertune.jsonfile import read_json
from infertune.models.adapter import Adapter
from infertune.models.variant import MANIFEST
from infertune.serve.batcher import BatchFailed, InputFailed
from infertune.serve.live_drift import DriftMonitor
from infertune.serve.model_processes import ModelSource, uses_processes
from infertune.serve.openapi import (
    ADMIN_PATHS,
    OPEN_PATHS,
    ConfigBody,
    HealthBody,
    ModelCard,
    ModelRef,
    PurgeResponse,
    ReadyBody,
    openapi_schema,
)
from infertune.serve.prometheus_metrics import STAGES, ServeMetrics
from infertune.serve.queue import Rejected
from infertune.serve.relay import COMPARISON_REPLAY
from infertune.serve.request_validation import (
    BadRequest,
    check_inputs,
    parse_predict,
    parse_purge,
    request_model,
)
from infertune.serve.runtime import ServeRuntime
from infertune.serve.warmup import prime_on_this_thread

log = logging.getLogger("infertune.serve")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]+")


def server_timing(timings: Mapping[str, float]) -> str:
    """``queue;dur=X, preprocess;dur=X, inference;dur=X, postprocess;dur=X`` in ms."""
    return ", ".join(f"{stage};dur={timings.get(stage, 0.0) * 1000:.3f}" for stage in STAGES)


def create_app(adapter: Adapter, policy: ServePolicy | None = None, *,
               clock: Callable[[], float] = time.monotonic, registry: Any = None,
               redis: Any = None, fast_adapter: Adapter | None = None,
               environ: Mapping[str, str] | None = None,
               warnings: Sequence[str] = (),
               model_source: ModelSource | None = None) -> Starlette:
    """The serving app for ``adapter`` (with ``policy.warmup``, one small forward runs on the
    calling thread first: see warmup.prime_on_this_thread). ``registry``: a prometheus
    CollectorRegistry (a new one by default); ``redis``: a redis.asyncio client (else one from
    ``policy.redis_url``); ``fast_adapter``: the cascade's fast model; ``environ``: where the
    API key is read (os.environ by default); ``warnings``: shown on /readyz (e.g. the CLI's
    note that the server is exposed without a key); ``model_source``: how a worker process
    loads the same model, for ``policy.worker_kind`` process or auto (without it batches run on
    threads)."""
    policy = policy or ServePolicy()
    in_processes = uses_processes(policy.worker_kind, adapter.info.runtime, model_source)
    if policy.warmup and not in_processes:  # in processes the parent never runs the model
        prime_on_this_thread(adapter)
        if fast_adapter is not None:
            prime_on_this_thread(fast_adapter)
    metrics = ServeMetrics(registry)
    runtime = ServeRuntime(adapter, policy, clock=clock, metrics=metrics, redis=redis,
                           fast_adapter=fast_adapter, model_source=model_source)
    api_key = _api_key(policy, os.environ if environ is None else environ)
    handlers = _Handlers(runtime, policy, clock, secured=api_key is not None,
                         warnings=list(warnings))

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
        Route("/v1/config", handlers.config, methods=["GET"]),
        Route("/v1/cache/purge", handlers.purge, methods=["POST"]),
        Route("/openapi.json", handlers.openapi, methods=["GET"]),
    ]
    admin = {r.path: frozenset(r.methods or ()) for r in routes if r.path in ADMIN_PATHS}
    app = Starlette(routes=routes, lifespan=lifespan,
                    middleware=[Middleware(GuardMiddleware, api_key=api_key, admin=admin)],
                    exception_handlers={HTTPException: _http_error})
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
    return JSONResponse({"error": safe_message(message)}, status_code=status,
                        headers={"Server-Timing": server_timing(timings or {}), **(headers or {})})


def safe_message(message: str) -> str:
    """One line (text from exceptions has its paths cut where it is made: request_validation.py)."""
    return _CONTROL.sub(" ", message).strip()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _error(exc.status_code, exc.detail, headers=dict(exc.headers or {}))


class _Handlers:
    def __init__(self, runtime: ServeRuntime, policy: ServePolicy,
                 clock: Callable[[], float], *, secured: bool, warnings: list[str]) -> None:
        self.runtime = runtime
        self.policy = policy
        self.clock = clock
        self.request_model = request_model(runtime.adapter, policy)
        self.card = model_card(runtime.adapter).model_dump(mode="json")
        self.document = openapi_schema(self.request_model, secured=secured)
        self.warnings = warnings
        # live input drift against the first rows answered (serve/live_drift.py)
        self.drift = DriftMonitor(
            lambda feature, value: runtime.metrics.drift_psi.labels(feature=feature).set(value))

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
            if not request.scope.get(COMPARISON_REPLAY):
                m.request_seconds.observe(self.clock() - arrived)
        return response

    async def _predict(self, request: Request, arrived: float) -> Response:
        m = self.runtime.metrics
        try:
            body = await _read_limited(request, self.policy.max_request_bytes,
                                       self.policy.body_timeout_s)
            req = parse_predict(body, self.policy, self.request_model)
            check_inputs(req.inputs, self.runtime.adapter, self.policy)
            result = await self.runtime.predict(req, arrived)
        except BadRequest as exc:
            m.errors.labels(type="invalid_request").inc()
            return _error(exc.status, str(exc))
        except Rejected as exc:
            retry = {"Retry-After": str(int(exc.retry_after_s))} if exc.retry_after_s else {}
            return _error(exc.status, str(exc), headers=retry)
        except InputFailed as exc:
            return _error(422, str(exc))
        except BatchFailed as exc:
            return _error(500, str(exc))
        except Exception as exc:  # noqa: BLE001 - one bad request must not take the server down
            log.exception("predict failed")
            m.errors.labels(type=f"internal_{type(exc).__name__}").inc()
            return _error(500, f"internal error: {type(exc).__name__}; see the server log")
        # The answer has PredictResponse's shape (the OpenAPI schema); it is encoded directly
        # because an embedding is hundreds of floats, and building the pydantic model and
        # running the stdlib encoder cost ~0.4 ms of event-loop time per answer.
        try:
            encoded = orjson.dumps({"outputs": result.outputs, "model": self.runtime.model,
                                    "cached": result.cached})
        except (TypeError, orjson.JSONEncodeError) as exc:
            m.errors.labels(type="output_not_json").inc()
            return _error(500, f"the model's output cannot be sent as JSON ({exc}); return "
                          "arrays, numbers, strings, lists or dicts from postprocess")
        if not all(result.cached) and not request.scope.get(COMPARISON_REPLAY):
            m.model_request_seconds.observe(self.clock() - arrived)
        self._watch_drift(req.inputs, result.outputs)
        return Response(encoded, media_type="application/json",
                        headers={"Server-Timing": server_timing(result.timings)})

    def _watch_drift(self, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        try:
            self.drift.observe(inputs, outputs)
        except Exception:  # noqa: BLE001 - a statistic must never fail an answer
            log.warning("drift monitor failed on a row", exc_info=True)

    async def healthz(self, request: Request) -> Response:
        return JSONResponse(HealthBody(status="alive").model_dump())

    async def readyz(self, request: Request) -> Response:
        if not self.runtime.ready:
            reason = self.runtime.warmup_error or "warming up"
            return _error(503, "; ".join([reason, *self.warnings]))
        deadline, bound = self.runtime.default_deadline_s(), self.runtime.answer_bound_s()
        body = ReadyBody(status="ready", model=ModelRef(**self.runtime.model),
                         default_deadline_ms=None if deadline is None else deadline * 1000,
                         answer_bound_ms=None if bound is None else bound * 1000,
                         warnings=self.warnings)
        return JSONResponse(body.model_dump(mode="json"))

    async def metrics(self, request: Request) -> Response:
        return Response(self.runtime.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    async def model(self, request: Request) -> Response:
        return JSONResponse(self.card)

    async def config(self, request: Request) -> Response:
        policy = self.policy.model_dump(mode="json")
        if policy.get("redis_url"):
            policy["redis_url"] = "<set>"  # a URL may carry a password
        deadline = self.runtime.default_deadline_s()
        body = ConfigBody(model=ModelRef(**self.runtime.model), policy=policy,
                          default_deadline_ms=None if deadline is None else deadline * 1000,
                          worker_kind=self.runtime.worker_kind,
                          padding_rule=(self.runtime.batcher.padding_rule
                                        if self.runtime.batcher is not None
                                        and self.runtime.adapter.info.kind == "text" else None))
        return JSONResponse(body.model_dump(mode="json"))

    async def purge(self, request: Request) -> Response:
        try:
            body = await _read_limited(request, 4096, self.policy.body_timeout_s)
            asked = parse_purge(body)
        except BadRequest as exc:
            return _error(exc.status, str(exc))
        assert self.runtime.cache is not None
        purged = await self.runtime.cache.purge(asked.layer, asked.scope)
        log.warning("cache purged: scope=%s layer=%s %s", asked.scope, asked.layer, purged)
        return JSONResponse(PurgeResponse(scope=asked.scope, purged=purged).model_dump())

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(self.document)


def model_card(adapter: Adapter) -> ModelCard:
    """The model's identity for /v1/model, with the variant's manifest.json when it came from a
    variant folder; never the server's paths (``source`` and ``tokenizer_dir`` are left out,
    absolute paths inside the manifest are cut to their last part)."""
    info = adapter.info
    manifest = None
    source = Path(info.source) if info.source else None
    # the file as written, not models.variant.read_manifest's Manifest: the card shows what the
    # variant folder holds (its manifest_sha256, and keys a newer infertune wrote that this
    # one's Manifest would drop), and answers for a manifest this version cannot type
    if source is not None and (source / MANIFEST).is_file():
        try:
            manifest = _scrub_paths(read_json(source / MANIFEST,
                                              fix="rebuild the variant with `infertune optimize`"))
        except ConfigError as exc:  # /v1/model still answers, without the manifest
            log.warning("%s; showing model info only", exc)
    return ModelCard(id=info.id, version=info.version, kind=info.kind, task=info.task,
                     runtime=info.runtime, precision=info.precision,
                     input_names=list(info.input_names), max_length=info.max_length,
                     max_position=info.max_position,
                     manifest=manifest if isinstance(manifest, dict) else None)


def _scrub_paths(value: Any) -> Any:
    if isinstance(value, str):
        if PurePosixPath(value).is_absolute() or PureWindowsPath(value).is_absolute() or (
                value.startswith("~")):
            return PurePosixPath(value.replace("\\", "/")).name
        return value
    if isinstance(value, list):
        return [_scrub_paths(v) for v in value]
    if isinstance(value, dict):
        return {k: _scrub_paths(v) for k, v in value.items()}
    return value


async def _read_limited(request: Request, limit: int, timeout_s: float) -> bytes:
    """The body, refusing (413) anything over ``limit`` bytes before reading all of it, and
    (408) a body that has not fully arrived within ``timeout_s``."""
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"request body is {int(declared)} bytes; the limit is {limit}; "
                         "send fewer or shorter inputs")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise BadRequest(413, f"request body is over the {limit}-byte limit; send "
                                     "fewer or shorter inputs")
                chunks.append(chunk)
    except TimeoutError as exc:
        raise BadRequest(408, f"the request body did not arrive within {timeout_s:g} s "
                         f"({size} bytes received); send it at once") from exc
    return b"".join(chunks)


class GuardMiddleware:
    """API-key check on every route but health, admin routes (``admin``: path -> methods)
    closed with 403 when no key is configured, and a Server-Timing header on every answer
    (zeros where a route ran no model stage), as pure ASGI so streaming is untouched. A method
    an admin route does not serve falls through to the router's 405."""

    def __init__(self, app: ASGIApp, api_key: str | None,
                 admin: Mapping[str, frozenset[str]] | None = None) -> None:
        self.app = app
        self.api_key = api_key
        self.admin = dict(admin or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if not self.api_key and scope["method"] in self.admin.get(path, ()):
            response = _error(403, f"{path} is an admin route and needs an API key; serve with "
                              "--api-key-env NAME (api_key_env in the policy), NAME holding the "
                              "key")
            await response(scope, receive, send)
            return
        if self.api_key and path not in OPEN_PATHS and not self._authorised(scope):
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
