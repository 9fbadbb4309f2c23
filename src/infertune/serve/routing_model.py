"""The router's typed values: releases as it receives them, the routing state and its
changes (with the pure transition, next_state), events and feedback as they leave it, the
protocols of its sinks and of a shared store, and its metrics.
serve/routing.py re-exports them; rollout/ builds and records them."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import BaseModel, ConfigDict, Field
from starlette.types import ASGIApp

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
Role = Literal["stable", "canary", "shadow", "loaded"]


@dataclass(frozen=True)
class RoutedRelease:
    """A loaded release: its ASGI app and the CollectorRegistry that app's metrics live on."""

    name: str
    app: ASGIApp
    registry: CollectorRegistry
    version: str = ""
    digest: str = ""


@dataclass(frozen=True)
class AgreementRule:
    """When two answers to one input agree: same top class (classifiers, rankers) or cosine
    >= ``min_cosine`` (embeddings, regressions), following the scenario's floor metric."""

    metric: Literal["top1", "cosine"] = "top1"
    min_cosine: float = 0.99

    def agrees(self, a: Any, b: Any) -> bool:
        x = np.asarray(a, dtype=np.float64).reshape(-1)
        y = np.asarray(b, dtype=np.float64).reshape(-1)
        if x.shape != y.shape or x.size == 0:
            return False
        if self.metric == "top1":
            return int(np.argmax(x)) == int(np.argmax(y))
        norms = float(np.linalg.norm(x) * np.linalg.norm(y))
        return norms > 0 and float(x @ y) / norms >= self.min_cosine


class RoutingState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stable: str
    canary: str | None = None
    canary_weight: float = Field(default=0.0, ge=0, le=100)  # percent of predict traffic
    shadow: str | None = None
    previous_stable: str | None = None


class RoutingChange(BaseModel):
    """The body of POST /admin/routing."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["weight", "promote", "rollback", "shadow", "canary"]
    weight: float | None = Field(default=None, ge=0, le=100)
    release: str | None = None
    reason: str | None = Field(default=None, max_length=2000)


def check_state(state: RoutingState, loaded: Collection[str]) -> None:
    """ValueError when ``state`` names a release not in ``loaded`` or a canary equal to the
    stable release."""
    for name in (state.stable, state.canary, state.shadow):
        if name is not None and name not in loaded:
            raise ValueError(f"release {name!r} is not loaded in this server; loaded: "
                             f"{', '.join(sorted(loaded))}")
    if state.canary is not None and state.canary == state.stable:
        raise ValueError("the canary must differ from the stable release")


def next_state(s: RoutingState, change: RoutingChange) -> tuple[RoutingState, str | None]:
    """The routing after ``change`` and the release it is about (ValueError when it cannot
    apply); pure, so a shared store (serve/engines/ray_routing.py) applies it the same way."""
    subject: str | None
    if change.action == "weight":
        if s.canary is None or change.weight is None:
            raise ValueError("no canary to weigh; start the server with --canary NAME and "
                             'send {"action": "weight", "weight": PCT}')
        new = s.model_copy(update={"canary_weight": change.weight})
        subject = s.canary
    elif change.action == "promote":
        if s.canary is None:
            raise ValueError("no canary to promote")
        new = RoutingState(stable=s.canary, shadow=s.shadow if s.shadow != s.canary
                           else None, previous_stable=s.stable)
        subject = s.canary
    elif change.action == "rollback":
        if s.canary is not None:
            new = s.model_copy(update={"canary": None, "canary_weight": 0.0})
            subject = s.canary
        elif s.previous_stable is not None:
            new = RoutingState(stable=s.previous_stable, shadow=s.shadow)
            subject = s.stable
        else:
            raise ValueError("nothing to roll back: no canary and no previous stable release")
    elif change.action == "canary":  # a new canary among the loaded releases
        if change.release is None:
            raise ValueError('name the new canary: {"action": "canary", "release": NAME}')
        new = s.model_copy(update={"canary": change.release,
                                   "canary_weight": change.weight or 0.0})
        subject = change.release
    else:
        new, subject = s.model_copy(update={"shadow": change.release}), change.release
    return new, subject


@dataclass(frozen=True)
class RoutingEvent:
    time: float  # unix seconds
    kind: Literal["start", "weight", "promote", "rollback", "shadow", "canary"]
    state: RoutingState
    reason: str | None = None
    subject: str | None = None  # the release the change was about (e.g. the one rolled back)


class FeedbackBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    request_id: str = Field(min_length=1, max_length=128)
    metric: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")
    value: int = Field(ge=0, le=1)  # a binary outcome (converted, retained, clicked)


@dataclass(frozen=True)
class FeedbackItem:
    request_id: str
    release: str
    unit: str | None
    metric: str
    value: int
    time: float


class EventSink(Protocol):
    def record_event(self, event: RoutingEvent) -> None: ...


class FeedbackSink(Protocol):
    def record_feedback(self, item: FeedbackItem) -> None: ...


class AnswerLog(Protocol):
    """Which release answered a request id (and for which unit), for feedback. In memory by
    default; shared (Redis) when several replicas serve, since feedback may reach another."""

    async def remember(self, request_id: str, release: str, unit: str | None) -> None: ...

    async def lookup(self, request_id: str) -> tuple[str, str | None] | None: ...


class RoutingStore(Protocol):
    """The routing state shared by the replicas of one deployment (serve/engines/
    ray_routing.py). ``change`` applies a change once, in order (ValueError when it cannot),
    and returns only when every running replica serves the new state."""

    async def change(self, change: RoutingChange) -> RoutingEvent: ...


class MemoryAnswerLog:
    """The last ``limit`` answers of this process."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self.answers: OrderedDict[str, tuple[str, str | None]] = OrderedDict()

    async def remember(self, request_id: str, release: str, unit: str | None) -> None:
        self.answers[request_id] = (release, unit)
        while len(self.answers) > self.limit:
            self.answers.popitem(last=False)

    async def lookup(self, request_id: str) -> tuple[str, str | None] | None:
        return self.answers.get(request_id)


class RouterMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.info = Gauge("infertune_release_info", "1 per loaded release, with its role",
                          ["release", "role", "version", "digest"], registry=r)
        self.weight = Gauge("infertune_release_weight_percent",
                            "Share of predict traffic routed to each release", ["release"],
                            registry=r)
        self.routed = Counter("infertune_routed_requests", "Predict requests by the release "
                              "that answered", ["release"], registry=r)
        self.rows = Counter("infertune_shadow_rows", "Output rows compared with the stable "
                            "release's on the same input", ["release", "outcome"], registry=r)
        self.mirror_skipped = Counter("infertune_mirror_skipped", "Replays not sent because "
                                      "too many were pending", ["release"], registry=r)
        self.feedback = Counter("infertune_feedback", "Feedback outcomes received",
                                ["release", "metric"], registry=r)
        self.feedback_ones = Counter("infertune_feedback_ones", "Feedback outcomes equal to 1",
                                     ["release", "metric"], registry=r)
        self.changes = Counter("infertune_routing_changes", "Routing changes", ["kind"],
                               registry=r)
