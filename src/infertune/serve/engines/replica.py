"""One Ray Serve replica: the same serving runtime as `infertune serve` (create_app: adapter,
preprocessing, batching, deadlines, cache, metrics) behind Ray Serve's ASGI ingress, so routes,
errors, headers and Server-Timing are the local engine's.

    ReplicaApp.build() -> HostedApp         runs on the replica (the spec must pickle)
    InfertuneReplica(spec)                   the deployment class (late-bound ASGI ingress)

Readiness: Ray calls ``check_health`` once right after a replica starts and counts the replica
as running (and routes to it) only when that call returns, so the first call waits for
infertune's warm-up — the moment /readyz turns 200 — and every call raises while warm-up has
failed, so Ray replaces the replica instead of sending it traffic.

/metrics: the answering replica's own series (as the local engine), plus, from every running
replica (a Ray broadcast, a control-plane call made once per scrape): ``infertune_replicas``,
``infertune_replica_queue_depth{replica}`` and ``infertune_replica_ongoing_requests{replica}``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from ray import serve
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from infertune.config import ServePolicy
from infertune.measure.curve import time_forward
from infertune.models import load
from infertune.models.adapter import Adapter, ModelInputs
from infertune.serve.app import create_app
from infertune.serve.cascade import without_spinning
from infertune.serve.engines.ray_routing import RayRoutingStore, Versioned
from infertune.serve.engines.shed_policy import REFUSED_SHARE
from infertune.serve.relay import labelled_texts
from infertune.serve.routing import Router, RoutingState
from infertune.serve.runtime import ServeRuntime

REFUSALS = frozenset({"503", "429"})
DRAIN_POLL_S = 0.01  # in-flight counts change when a batch answers: every few ms at most


@dataclass
class HostedApp:
    """What a replica serves: its ASGI app and the runtimes (queues) behind it."""

    asgi: ASGIApp
    runtimes: list[ServeRuntime]
    adapter: Adapter  # the model whose service time sizes the replica
    router: Router | None = None  # several releases behind the router (issue 15)
    routing: RayRoutingStore | None = None  # the routing state every replica shares

    def ready(self) -> bool:
        return all(rt.ready for rt in self.runtimes)

    def warmup_error(self) -> str | None:
        return next((rt.warmup_error for rt in self.runtimes if rt.warmup_error), None)


class ReplicaApp(Protocol):
    """A picklable recipe built on each replica. ModelApp serves one model;
    rollout.ray_router.RouterApp serves registry releases behind the router, returning the
    router, every release's runtime and the shared routing store."""

    def build(self) -> HostedApp: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class ModelApp:
    model_ref: str
    policy: ServePolicy
    fast_model_ref: str | None = None
    model_threads: int = 1
    warnings: tuple[str, ...] = ()  # shown on /readyz, as the local engine does

    def build(self) -> HostedApp:
        adapter = load(self.model_ref)
        fast = load(self.fast_model_ref) if self.fast_model_ref else None
        if fast is not None:
            adapter, fast = without_spinning(adapter, fast)
        set_torch_threads(adapter, self.model_threads)
        app = create_app(adapter, self.policy, fast_adapter=fast, warnings=self.warnings)
        return HostedApp(app, [app.state.runtime], adapter)

    def describe(self) -> str:
        return self.model_ref


def set_torch_threads(adapter: Adapter, threads: int) -> None:
    """One replica per CPU it was given: torch's pool sized to that, not to the whole node
    (two replicas x two threads on two cores oversubscribe them). ONNX Runtime variants carry
    their own thread settings and are left alone."""
    if adapter.info.runtime != "torch":
        return
    import torch  # optional extra: only torch models reach here

    torch.set_num_threads(threads)


@dataclass(frozen=True)
class ReplicaSignals:
    replica: str
    queue_depth: int
    ongoing_requests: int
    ready: bool
    routing_version: int | None = None  # the shared routing state it serves (router only)
    canary_weight: float | None = None


def signals_exposition(signals: Sequence[ReplicaSignals]) -> bytes:
    """Prometheus text for the scale-out signals of every replica that answered."""
    registry = CollectorRegistry()
    Gauge("infertune_replicas", "Replicas running (answered the last signals broadcast)",
          registry=registry).set(len(signals))
    depth = Gauge("infertune_replica_queue_depth", "Requests waiting in a replica's queue",
                  ["replica"], registry=registry)
    ongoing = Gauge("infertune_replica_ongoing_requests",
                    "Predict requests a replica is handling (queued or running)", ["replica"],
                    registry=registry)
    routed = [s for s in signals if s.routing_version is not None]
    if routed:  # so an operator (and the tests) see that a routing change reached every one
        version = Gauge("infertune_replica_routing_version", "Version of the shared routing "
                        "state a replica serves", ["replica"], registry=registry)
        weight = Gauge("infertune_replica_canary_weight_percent", "Canary weight a replica "
                       "routes with", ["replica"], registry=registry)
        for s in routed:
            version.labels(s.replica).set(s.routing_version or 0)
            weight.labels(s.replica).set(s.canary_weight or 0.0)
    for s in signals:
        depth.labels(s.replica).set(s.queue_depth)
        ongoing.labels(s.replica).set(s.ongoing_requests)
    return generate_latest(registry)


class SignalsMiddleware:
    """Appends every replica's scale-out signals to a successful GET /metrics answer. With
    ``merge`` (the release router) the answer's own series are replaced by every replica's,
    each with a ``replica`` label: a canary judged on /metrics sees all the traffic, not the
    share of whichever replica answered the scrape."""

    def __init__(self, app: ASGIApp,
                 collect: Callable[[], Awaitable[Sequence[ReplicaSignals]]],
                 merge: Callable[[], Awaitable[bytes]] | None = None) -> None:
        self.app = app
        self.collect = collect
        self.merge = merge

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/metrics" or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []

        async def keep(message: Message) -> None:
            messages.append(message)

        await self.app(scope, receive, keep)
        start = next(m for m in messages if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
        if start["status"] == 200:
            if self.merge is not None:
                body = await self.merge()
            body += signals_exposition(await self.collect())
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def service_times(adapter: Adapter, batch_sizes: Sequence[int], repeats: int,
                  max_seconds: float) -> dict[int, float]:
    """p50 ms of preprocess + forward + postprocess for each batch size, on this replica."""
    out: dict[int, float] = {}
    for b in batch_sizes:
        raw = adapter.sample_inputs(b)
        times = time_forward(_whole_request(adapter, raw), {}, repeats=repeats,
                             max_seconds=max_seconds)
        out[b] = float(np.median(times))
    return out


def _whole_request(adapter: Adapter, raw: list[Any]) -> Callable[[ModelInputs], Any]:
    def call(_: ModelInputs) -> Any:
        return adapter.predict(raw)
    return call


@serve.ingress()
class InfertuneReplica:
    """The deployment class; ``RayEngine`` applies the options (CPUs, autoscaling)."""

    def __init__(self, spec: ReplicaApp) -> None:
        started = time.monotonic()
        self._hosted = spec.build()
        self._build_s = time.monotonic() - started
        self._ready_s: float | None = None
        self._started = started
        self._routing_version = 0  # the shared routing state this replica serves (0: initial)
        self._last_counts = (0.0, 0.0)  # answered and refused at the last autoscaling report

    def __serve_build_asgi_app__(self) -> ASGIApp:
        merge = self._all_router_metrics if self._hosted.router is not None else None
        return SignalsMiddleware(self._hosted.asgi, self._all_signals, merge)

    async def check_health(self) -> None:
        hosted = self._hosted
        if self._ready_s is None:
            # Ray's first call (before the replica counts as running): wait out the warm-up,
            # however long the model takes; later calls answer at once
            while not hosted.ready() and hosted.warmup_error() is None:
                await asyncio.sleep(0.02)
        error = hosted.warmup_error()
        if error is not None:
            raise RuntimeError(error)
        if not hosted.ready():
            raise RuntimeError("infertune warm-up still running; not taking traffic yet")
        if hosted.routing is not None:
            # after warm-up, before the first traffic, and every few seconds after: catch up
            # with a routing change whose broadcast this replica missed, e.g. made while it
            # warmed up (a raise: the owner went with the driver, so this replica must not serve)
            await self.adopt_routing(await hosted.routing.current())
        if self._ready_s is None:
            self._ready_s = time.monotonic() - self._started

    async def signals(self) -> ReplicaSignals:
        runtime = self._hosted.runtimes[0]
        queue = runtime.queue
        depth = len(queue) if queue is not None else 0
        ongoing = runtime.metrics.registry.get_sample_value("infertune_in_flight") or 0.0
        router = self._hosted.router
        routing = router.state if router is not None else None
        return ReplicaSignals(
            serve.get_replica_context().replica_tag, depth, int(ongoing), self._hosted.ready(),
            self._routing_version if routing is not None else None,
            (routing.canary_weight if routing.canary else 0.0) if routing is not None else None)

    async def adopt_routing(self, versioned: Versioned) -> int:
        """Serve ``versioned`` unless this replica already serves a newer one; returns the
        version served (a broadcast from the replica that took a routing change)."""
        router = self._hosted.router
        if router is not None and versioned.version > self._routing_version:
            router.adopt(versioned.state)
            self._routing_version = versioned.version
        return self._routing_version

    async def routing_view(self) -> tuple[str, int, RoutingState | None]:
        """(replica, version, routing state) this replica serves."""
        router = self._hosted.router
        return (serve.get_replica_context().replica_tag, self._routing_version,
                router.state if router is not None else None)

    async def drain(self, timeout_s: float) -> int:
        """Refuse new predictions (503, as a local engine shutting down) and answer the ones
        accepted; returns how many are still unanswered after ``timeout_s`` (0: drained).
        The engine calls it on every replica before Serve's shutdown, which kills the HTTP
        proxy at once and would cut the answers still on their way through it."""
        for runtime in self._hosted.runtimes:
            if runtime.queue is not None:
                runtime.queue.close()  # queued requests are still served
        give_up = time.monotonic() + timeout_s
        while (left := self._in_flight()) and time.monotonic() < give_up:
            await asyncio.sleep(DRAIN_POLL_S)
        return left

    async def record_autoscaling_stats(self) -> dict[str, float]:
        """Ray's custom-metric hook, called every metric push: the share of the predict
        requests answered since the last call that were refused (503/429), for
        shed_policy's rule; 0 with none answered."""
        total, refused = self._answer_counts()
        last_total, last_refused = self._last_counts
        self._last_counts = (total, refused)
        answered = total - last_total
        share = (refused - last_refused) / answered if answered > 0 else 0.0
        return {REFUSED_SHARE: share}

    def _answer_counts(self) -> tuple[float, float]:
        """(predict requests answered, of them refused with 503/429), over every runtime."""
        total = refused = 0.0
        for runtime in self._hosted.runtimes:
            for family in runtime.metrics.registry.collect():
                if family.name != "infertune_requests":
                    continue
                for sample in family.samples:
                    if sample.name.endswith("_total"):
                        total += sample.value
                        refused += sample.value * (sample.labels.get("status") in REFUSALS)
        return total, refused

    def _in_flight(self) -> int:
        """Predict requests accepted and not yet answered, over every runtime."""
        return int(sum(rt.metrics.registry.get_sample_value("infertune_in_flight") or 0.0
                       for rt in self._hosted.runtimes))

    async def startup_seconds(self) -> dict[str, float | None]:
        """Seconds from the replica's constructor to the model built and to warm-up done."""
        return {"build_s": self._build_s, "ready_s": self._ready_s}

    async def service_times(self, batch_sizes: list[int], repeats: int,
                            max_seconds: float) -> dict[int, float]:
        return await asyncio.to_thread(service_times, self._hosted.adapter, batch_sizes,
                                       repeats, max_seconds)

    async def router_metrics(self) -> tuple[str, str]:
        """(replica, this replica's router exposition: every release's series)."""
        router = self._hosted.router
        text = router.exposition().decode() if router is not None else ""
        return serve.get_replica_context().replica_tag, text

    async def _all_router_metrics(self) -> bytes:
        results = await self._broadcast("router_metrics")
        return labelled_texts(sorted(r for r in results if isinstance(r, tuple)), "replica")

    async def _broadcast(self, method: str) -> list[Any]:
        ctx = serve.get_replica_context()
        handle = serve.get_deployment_handle(ctx.deployment, ctx.app_name)
        results: list[Any] = await handle.broadcast(method).results_async()
        return results

    async def _all_signals(self) -> Sequence[ReplicaSignals]:
        results = await self._broadcast("signals")
        return sorted((r for r in results if isinstance(r, ReplicaSignals)),
                      key=lambda s: s.replica)
