"""Registry releases behind the router on Ray Serve: `infertune serve --engine ray --registry
DIR --stable A [--canary B --canary-weight PCT] [--shadow C]`.

    RouterApp(root, state, policy_for, owner)   the replica recipe (serve.engines.replica)
    serve_releases_on_ray(...)                  what the command runs

Each replica builds the same router as the local engine (rollout.release_router.build_router:
every release hash-verified and loaded) with a RayRoutingStore, so routing changes go through the
one routing owner and reach every replica (serve/engines/ray_routing.py says why an actor). The API
is the local engine's. The registry folder must be readable at the same path on every node
(the replicas load the releases from it and append routing events to its log). Feedback and the
answer log are per replica unless the serve policy sets redis_url, as with several local
replicas: feedback sent to another replica than the one that answered finds nothing.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from starlette.types import ASGIApp

from infertune.config import ServePolicy
from infertune.rollout.release_registry import Registry
from infertune.rollout.release_router import build_router
from infertune.serve.engines.ray_engine import RayEngine, RayOptions, serve_engine
from infertune.serve.engines.ray_routing import RayRoutingStore, start_routing_owner
from infertune.serve.engines.replica import HostedApp, set_torch_threads
from infertune.serve.routing import EventSink, RoutingEvent, RoutingState
from infertune.serve.runtime import ServeRuntime

PolicyFor = Callable[[ServePolicy], ServePolicy]


@dataclass(frozen=True)
class RouterApp:
    root: Path
    state: RoutingState  # the routing at start; the owner's copy rules once it changes
    policy_for: PolicyFor  # the command's layers over each release's recorded policy
    owner: str  # the routing owner's actor name
    model_threads: int = 1

    def build(self) -> HostedApp:
        store = RayRoutingStore(self.owner)
        registry = Registry(self.root)
        router = build_router(registry, self.state, self.policy_for, os.environ, store=store)
        router.events = ChangesOnly(registry)
        runtimes = {name: _runtime(rel.app) for name, rel in router.releases.items()}
        stable = runtimes[self.state.stable]
        for runtime in runtimes.values():
            set_torch_threads(runtime.adapter, self.model_threads)
        return HostedApp(router, [stable, *(r for r in runtimes.values() if r is not stable)],
                         stable.adapter, router=router, routing=store)

    def describe(self) -> str:
        return f"releases {', '.join(names(self.state))} from {self.root}"


def names(state: RoutingState) -> list[str]:
    """The releases ``state`` serves, stable first."""
    return list(dict.fromkeys(n for n in (state.stable, state.canary, state.shadow) if n))


class ChangesOnly:
    """A replica's event sink: the routing changes it took, not its start. The driver records
    the one start; a replica added later starts from the start-up routing (it adopts the
    current one before taking traffic) and would log it, moving a rolled-back canary back to
    'canary' in the registry."""

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink

    def record_event(self, event: RoutingEvent) -> None:
        if event.kind != "start":
            self.sink.record_event(event)


def _runtime(app: ASGIApp) -> ServeRuntime:
    """The serving runtime create_app keeps on its app's state (its queue, for the signals)."""
    runtime = cast(Any, app).state.runtime
    assert isinstance(runtime, ServeRuntime)
    return runtime


def serve_releases_on_ray(root: Path, state: RoutingState, policy_for: PolicyFor, *,
                          host: str, port: int, address: str | None,
                          min_replicas: int | None = None,
                          echo: Callable[[str], None] = print) -> None:
    registry = Registry(root)
    for name in names(state):
        registry.verified_path(name)  # a missing or altered release fails here, not on Ray
    policy = policy_for(registry.get(state.stable).record.policy)
    registry.close()
    cpus = float(policy.model_threads or 1)
    app = RouterApp(root.resolve(), state, policy_for, owner=f"infertune-routing-{port}",
                    model_threads=max(1, int(cpus)))
    if policy.redis_url is None:
        echo("note: feedback (POST /v1/feedback) is kept per replica; with more than one "
             "replica, serve with --redis-url so any replica finds the answer it refers to")
    options = RayOptions(address=address, host=host, port=port, cpus_per_replica=cpus,
                         plan_path=Path.cwd() / "ray_autoscaling.json",
                         min_replicas=min_replicas)

    def start() -> object:  # once Ray is up, before any replica: the owner, the one start event
        owner = start_routing_owner(app.owner, state, names(state))
        with contextlib.closing(Registry(root)) as reg:
            reg.record_event(RoutingEvent(time.time(), "start", state))
        return owner

    engine = RayEngine(app, policy, options, None, echo, on_connect=start)
    canary = f", canary {state.canary} at {state.canary_weight:g}%" if state.canary else ""
    shadow = f", shadow {state.shadow}" if state.shadow else ""
    serve_engine(engine, f"serving stable {state.stable}{canary}{shadow} from {root} on "
                 f"http://{host}:{port} through Ray Serve (routing shared by every replica)")
