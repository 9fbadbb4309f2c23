"""The multi-release router: one ASGI app in front of one serving app per release.

    Router([RoutedRelease(name, create_app(adapter, policy, registry=r), r), ...], state)

Each POST /v1/predict goes to the stable release or, with ``canary_weight`` percent, to the
canary: sticky per unit (SHA-256 of ``X-Unit-Id`` mapped to [0, 100); a random draw when the
header is absent), so raising the weight from 5 to 25 keeps every unit that saw the canary on
it. Answers carry ``X-Release`` and ``X-Request-Id``. Requests answered by the canary are
replayed to the stable release, and stable answers to the shadow release, in the background;
the two answers are compared row by row with the AgreementRule and counted in
``infertune_shadow_rows_total{release, outcome}``; a replayed answer is never returned.

Routes of its own: GET /healthz, GET /readyz (every release ready), GET /metrics (each
release's own registry with ``release="NAME"`` added to every sample, plus
``infertune_release_info``), POST /v1/feedback, and GET/POST /admin/routing, which always need
the API key. Every other route goes to the stable release's app. Routing changes are plain
assignments on the event loop, so they apply to the next request while requests already
inside a release's app finish there: a rollback loses nothing in flight. With several
replicas (`serve --engine ray`) a RoutingStore owns the state: a change is applied once, in
order, by the store, which returns only when every replica serves it (Router.adopt on each).
This module knows nothing of the registry (rollout/ sits above serve/): releases arrive
already loaded, and events and feedback leave through the EventSink and FeedbackSink
protocols.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import random
import re
import time
import uuid
from collections.abc import Callable, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError
from starlette.types import Message, Receive, Scope, Send

from infertune.serve.relay import (
    COMPARISON_REPLAY,
    AppLifespan,
    call_app,
    get_scope,
    headers_of,
    labelled_exposition,
    read_body,
    respond,
    respond_error,
    respond_json,
)
from infertune.serve.routing_model import (
    NAME_PATTERN,
    AgreementRule,
    AnswerLog,
    EventSink,
    FeedbackBody,
    FeedbackItem,
    FeedbackSink,
    MemoryAnswerLog,
    Role,
    RoutedRelease,
    RouterMetrics,
    RoutingChange,
    RoutingEvent,
    RoutingState,
    RoutingStore,
    check_state,
    next_state,
)

__all__ = ["NAME_PATTERN", "AgreementRule", "AnswerLog", "EventSink", "FeedbackBody",
           "FeedbackItem", "FeedbackSink", "MemoryAnswerLog", "RoutedRelease", "Router",
           "RouterMetrics", "RoutingChange", "RoutingEvent", "RoutingState", "RoutingStore",
           "check_state", "next_state", "unit_bucket"]

log = logging.getLogger("infertune.serve.routing")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def unit_bucket(unit: str) -> float:
    """A unit's fixed place in [0, 100): the canary takes units below its weight."""
    head = hashlib.sha256(unit.encode()).digest()[:8]
    return int.from_bytes(head, "big") / 2**64 * 100


class Router:
    def __init__(self, releases: Sequence[RoutedRelease], state: RoutingState, *,
                 api_key: str | None = None, rule: AgreementRule | None = None,
                 events: EventSink | None = None, feedback: FeedbackSink | None = None,
                 rng: random.Random | None = None, clock: Callable[[], float] = time.time,
                 max_body_bytes: int = 1_000_000, max_pending_mirrors: int = 64,
                 answer_log: AnswerLog | None = None,
                 store: RoutingStore | None = None) -> None:
        self.releases = {r.name: r for r in releases}
        if len(self.releases) != len(releases):
            raise ValueError("release names must be distinct")
        self._check(state)
        self.state = state
        self.api_key = api_key
        self.rule = rule or AgreementRule()
        self.events, self.feedback = events, feedback
        self.rng = rng or random.Random()
        self.clock = clock
        self.max_body_bytes = max_body_bytes
        self.max_pending_mirrors = max_pending_mirrors
        self.answer_log = answer_log or MemoryAnswerLog()
        self.store = store  # several replicas: changes go through it and reach every one
        self.pending: set[asyncio.Task[None]] = set()
        self.metrics = RouterMetrics()
        self._lifespans: list[AppLifespan] = []
        self._publish()

    # -- routing state -------------------------------------------------------------------
    def _check(self, state: RoutingState) -> None:
        check_state(state, self.releases)

    def adopt(self, state: RoutingState) -> None:
        """Serve ``state`` from the next request on: a change another replica made through
        the shared store (ValueError when it names a release not loaded here)."""
        self._check(state)
        self.state = state
        self._publish()

    def _publish(self) -> None:
        s, m = self.state, self.metrics
        m.info.clear()
        m.weight.clear()
        roles: dict[str, Role] = {name: "loaded" for name in self.releases}
        roles[s.stable] = "stable"
        if s.shadow:
            roles[s.shadow] = "shadow"
        if s.canary:
            roles[s.canary] = "canary"
        for name, role in roles.items():
            rel = self.releases[name]
            m.info.labels(name, role, rel.version, rel.digest).set(1)
        canary_share = s.canary_weight if s.canary else 0.0
        m.weight.labels(s.stable).set(100.0 - canary_share)
        if s.canary:
            m.weight.labels(s.canary).set(canary_share)

    def apply(self, change: RoutingChange) -> RoutingEvent:
        """Change the routing now (raises ValueError with the reason when it cannot)."""
        new, subject = next_state(self.state, change)
        self._check(new)
        self.state = new
        self._publish()
        event = RoutingEvent(self.clock(), change.action, new, change.reason, subject)
        self.metrics.changes.labels(change.action).inc()
        return event

    def start_event(self) -> RoutingEvent:
        return RoutingEvent(self.clock(), "start", self.state)

    def choose(self, unit: str | None) -> str:
        s = self.state
        if s.canary is None or s.canary_weight <= 0:
            return s.stable
        place = unit_bucket(unit) if unit else self.rng.random() * 100
        return s.canary if place < s.canary_weight else s.stable

    # -- ASGI ----------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            await self.releases[self.state.stable].app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        if path == "/v1/predict" and method == "POST":
            await self._predict(scope, receive, send)
        elif path == "/healthz":
            await respond_json(send, 200, {"status": "alive"})
        elif path == "/readyz":
            await self._readyz(send)
        elif path == "/metrics" and method == "GET":
            if await self._guard(scope, send, admin=False):
                await respond(send, 200, self.exposition(), CONTENT_TYPE_LATEST)
        elif path == "/v1/feedback" and method == "POST":
            if await self._guard(scope, send, admin=False):
                await self._feedback(receive, send)
        elif path == "/admin/routing":
            if await self._guard(scope, send, admin=True):
                await self._admin(method, receive, send)
        else:
            await self.releases[self.state.stable].app(scope, receive, send)

    async def _predict(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await read_body(receive, self.max_body_bytes)
        if body is None:
            await respond_error(send, 413, f"request body is over the {self.max_body_bytes}-"
                                "byte limit; send fewer or shorter inputs")
            return
        headers = headers_of(scope)
        unit = headers.get("x-unit-id") or None
        given = headers.get("x-request-id", "")
        request_id = given if _REQUEST_ID.match(given) else uuid.uuid4().hex
        name = self.choose(unit)
        extra = [(b"x-release", name.encode()), (b"x-request-id", request_id.encode())]
        self.metrics.routed.labels(name).inc()
        s = self.state
        # the other side of the comparison: the stable for a canary answer, else the shadow
        other = s.stable if name == s.canary else s.shadow if name == s.stable else None
        # recorded while the model runs, and before the answer leaves: a client may send its
        # feedback (to any replica) as soon as it has the answer
        remembered = asyncio.ensure_future(self._remember(request_id, name, unit))

        async def send_when_remembered(message: Message) -> None:
            if message["type"] == "http.response.start":
                await remembered
            await send(message)

        status, answer = await call_app(self.releases[name].app, scope, body,
                                        send_when_remembered, extra,
                                        capture=other is not None, disconnect=receive)
        await remembered
        if other is not None and status == 200:
            self._mirror(scope, body, other, answer, primary_is_candidate=name == s.canary)

    async def _remember(self, request_id: str, release: str, unit: str | None) -> None:
        try:
            await self.answer_log.remember(request_id, release, unit)
        except Exception:  # noqa: BLE001 - a lost feedback link must not fail the answer
            log.warning("cannot record which release answered %s", request_id, exc_info=True)

    def _mirror(self, scope: Scope, body: bytes, target: str, primary_answer: bytes, *,
                primary_is_candidate: bool) -> None:
        """Replay ``body`` to ``target`` and compare; the candidate is the canary (answered,
        replayed to the stable) or the shadow (replayed to, after the stable answered)."""
        candidate = self.state.canary if primary_is_candidate else target
        assert candidate is not None
        if len(self.pending) >= self.max_pending_mirrors:
            self.metrics.mirror_skipped.labels(target).inc()
            return

        replay_scope = {**scope, COMPARISON_REPLAY: True} if primary_is_candidate else scope

        async def replay() -> None:
            status, answer = await call_app(self.releases[target].app, replay_scope, body, None,
                                            [], capture=True, disconnect=None)
            if status != 200:
                self.metrics.rows.labels(candidate, "error").inc()
                return
            if primary_is_candidate:
                self._compare(candidate, primary_answer, answer)
            else:
                self._compare(candidate, answer, primary_answer)

        task = asyncio.get_running_loop().create_task(replay())
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    def _compare(self, candidate: str, mine: bytes, theirs: bytes) -> None:
        try:
            a, b = json.loads(mine)["outputs"], json.loads(theirs)["outputs"]
        except (ValueError, KeyError, TypeError):
            self.metrics.rows.labels(candidate, "error").inc()
            return
        if len(a) != len(b):
            self.metrics.rows.labels(candidate, "disagree").inc(max(len(a), len(b)))
            return
        for x, y in zip(a, b, strict=True):
            outcome = "agree" if self.rule.agrees(x, y) else "disagree"
            self.metrics.rows.labels(candidate, outcome).inc()

    async def _readyz(self, send: Send) -> None:
        for name, rel in self.releases.items():
            status, _ = await call_app(rel.app, get_scope("/readyz"), b"", None, [],
                                    capture=False, disconnect=None)
            if status != 200:
                await respond_error(send, 503, f"release {name} is not ready yet")
                return
        await respond_json(send, 200, {"status": "ready", "releases": sorted(self.releases)})

    async def _feedback(self, receive: Receive, send: Send) -> None:
        raw = await read_body(receive, 4096)
        try:
            item = FeedbackBody.model_validate_json(raw or b"")
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or "body"
            await respond_error(send, 422, f"feedback {field}: {err['msg']}; send "
                                '{"request_id": "<X-Request-Id>", "metric": "conversion", '
                                '"value": 0 or 1}')
            return
        try:
            known = await self.answer_log.lookup(item.request_id)
            if known is not None and self.feedback is not None:
                record = FeedbackItem(item.request_id, known[0], known[1], item.metric,
                                      item.value, self.clock())
                await asyncio.to_thread(self.feedback.record_feedback, record)
        except Exception as exc:  # noqa: BLE001 - the store is down: say so, keep serving
            log.warning("feedback store failed", exc_info=True)
            await respond_error(send, 503, f"the feedback store is unreachable "
                                f"({type(exc).__name__}); retry later")
            return
        if known is None:
            await respond_error(send, 404, f"request id {item.request_id!r} is unknown (too "
                                "old, or never answered here); send the X-Request-Id of a "
                                "recent answer")
            return
        release = known[0]
        self.metrics.feedback.labels(release, item.metric).inc()
        if item.value == 1:
            self.metrics.feedback_ones.labels(release, item.metric).inc()
        await respond_json(send, 200, {"recorded": True, "release": release})

    async def _admin(self, method: str, receive: Receive, send: Send) -> None:
        if method == "GET":
            await respond_json(send, 200, self.state.model_dump())
            return
        raw = await read_body(receive, 4096)
        try:
            change = RoutingChange.model_validate_json(raw or b"")
            if self.store is None:
                event = self.apply(change)
            else:  # applied once, in order, by the store; it returns when every replica has it
                event = await self.store.change(change)
                self.metrics.changes.labels(change.action).inc()
        except ValidationError as exc:
            err = exc.errors()[0]
            await respond_error(send, 422, f"routing change: {err['msg']}; send "
                                '{"action": "weight|promote|rollback|shadow|canary", ...}')
            return
        except ValueError as exc:
            await respond_error(send, 409, str(exc))
            return
        if self.events is not None:
            await asyncio.to_thread(self.events.record_event, event)
        await respond_json(send, 200, self.state.model_dump())

    async def _guard(self, scope: Scope, send: Send, *, admin: bool) -> bool:
        if self.api_key is None and not admin:
            return True
        if self.api_key is None:
            await respond_error(send, 403, "admin routes need an API key; set api_key_env in "
                                "the serve policy and export that variable")
            return False
        headers = headers_of(scope)
        given = headers.get("x-api-key", "")
        bearer = headers.get("authorization", "")
        if not given and bearer.lower().startswith("bearer "):
            given = bearer[7:].strip()
        if given and hmac.compare_digest(given.encode(), self.api_key.encode()):
            return True
        await respond_error(send, 401, "missing or wrong API key; send X-API-Key: <key>")
        return False

    def exposition(self) -> bytes:
        """Every release's metrics with ``release="NAME"``, then the router's own."""
        named = [(name, rel.registry) for name, rel in self.releases.items()]
        return labelled_exposition(named) + generate_latest(self.metrics.registry)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        try:
            for rel in self.releases.values():
                span = AppLifespan(rel.app)
                await span.start()
                self._lifespans.append(span)
        except Exception as exc:  # noqa: BLE001 - reported to the server, which exits
            await send({"type": "lifespan.startup.failed", "message": str(exc)})
            return
        if self.events is not None:
            await asyncio.to_thread(self.events.record_event, self.start_event())
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        if self.pending:
            await asyncio.wait(set(self.pending), timeout=10)
        for span in reversed(self._lifespans):
            await span.stop()
        await send({"type": "lifespan.shutdown.complete"})
