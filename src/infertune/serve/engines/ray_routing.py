"""Release routing (stable / canary / shadow, issue 15) shared by every replica of `infertune
serve --engine ray`.

    owner = start_routing_owner(name, state, loaded)   # on the driver, before any replica
    RayRoutingStore(name)                               # on each replica: the Router's store

One Ray named actor, the *routing owner*, holds the RoutingState and a version number. A change
(POST /admin/routing on whichever replica Ray's proxy picked) goes to the owner, which applies
it with serve.routing's own next_state, one change at a time (an actor runs its methods in
order), and bumps the version. The replica that took the change then broadcasts the new state
to every replica of the deployment and answers only when they all serve it, so a rollback or a
gate decision is in force everywhere once its response arrives. A replica that misses the
broadcast (starting, or restarted) catches up in its health check, which Ray calls every few
seconds and once before the replica takes traffic; versions keep an old state from replacing a
newer one.

Why an actor and not the registry's SQLite: on a multi-node cluster the replicas do not share
a disk (and SQLite's locking is unreliable over network filesystems), while a named actor is
reachable from every node of the cluster the replicas already share, with no service to run
beside it. Its state is small and changes rarely: the request path never calls it (each
replica routes from its own copy), so it is no bottleneck. It lives as long as the driver
(`infertune serve`), as the deployment does; the registry's event log still records every
change, written by the replica that took it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import ray
from ray import serve

from infertune.serve.routing import (
    RoutingChange,
    RoutingEvent,
    RoutingState,
    check_state,
    next_state,
)

NAMESPACE = "infertune"
log = logging.getLogger("infertune.serve.engines.ray_routing")


@dataclass(frozen=True)
class Versioned:
    version: int
    state: RoutingState


@dataclass(frozen=True)
class Outcome:
    """What the owner answers a change: the new version and event, or why it cannot apply."""

    version: int
    event: RoutingEvent | None = None
    error: str | None = None


class RoutingOwner:
    """The actor body: the one copy of the routing state that changes are applied to."""

    def __init__(self, state: RoutingState, loaded: Sequence[str]) -> None:
        self.loaded = frozenset(loaded)
        check_state(state, self.loaded)
        self.current = Versioned(1, state)

    def change(self, change: RoutingChange) -> Outcome:
        try:
            new, subject = next_state(self.current.state, change)
            check_state(new, self.loaded)
        except ValueError as exc:  # the Router answers it as 409, as the local engine does
            return Outcome(self.current.version, error=str(exc))
        self.current = Versioned(self.current.version + 1, new)
        return Outcome(self.current.version, RoutingEvent(time.time(), change.action, new,
                                                          change.reason, subject))

    def state(self) -> Versioned:
        return self.current


def start_routing_owner(name: str, state: RoutingState, loaded: Sequence[str]) -> Any:
    """Create the owner on the connected cluster (from the driver); keep the handle for as
    long as the deployment serves. No CPU: it must not take a replica's place."""
    actor = ray.remote(RoutingOwner).options(name=name, namespace=NAMESPACE, num_cpus=0,
                                             max_concurrency=1)
    return actor.remote(state, list(loaded))


class RayRoutingStore:
    """serve.routing.RoutingStore on Ray: changes through the owner, then to every replica by
    a broadcast of ``adopt_routing`` (InfertuneReplica's method)."""

    def __init__(self, owner_name: str) -> None:
        self.owner_name = owner_name
        self._handle: Any = None

    def _owner(self) -> Any:
        if self._handle is None:  # looked up once: the owner lives as long as the deployment
            self._handle = ray.get_actor(self.owner_name, namespace=NAMESPACE)
        return self._handle

    async def change(self, change: RoutingChange) -> RoutingEvent:
        outcome: Outcome = await self._owner().change.remote(change)
        if outcome.event is None:
            raise ValueError(outcome.error or "the routing owner refused the change")
        await self.broadcast(Versioned(outcome.version, outcome.event.state))
        return outcome.event

    async def current(self) -> Versioned:
        result: Versioned = await self._owner().state.remote()
        return result

    async def broadcast(self, versioned: Versioned) -> None:
        ctx = serve.get_replica_context()
        handle = serve.get_deployment_handle(ctx.deployment, ctx.app_name)
        try:
            await handle.broadcast("adopt_routing", versioned).results_async()
        except Exception:  # noqa: BLE001 - the owner has it; the health check catches up
            log.warning("a replica did not take routing version %d yet; it will at its next "
                        "health check", versioned.version, exc_info=True)
