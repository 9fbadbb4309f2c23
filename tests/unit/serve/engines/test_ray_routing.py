"""Routing shared by several replicas, without Ray: the routing owner applies changes in order
with versions and refuses bad ones; two in-process routers behind one owner (the broadcast of
RayRoutingStore played by a fake store) both serve a change made through either before its
admin call answers; a replica's /metrics carries every replica's router series and routing
version."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from infertune.config import ServePolicy
from infertune.serve import create_app
from infertune.serve.engines.ray_routing import RoutingOwner, Versioned
from infertune.serve.engines.replica import ReplicaSignals, SignalsMiddleware, signals_exposition
from infertune.serve.relay import labelled_texts
from infertune.serve.routing import (
    RoutedRelease,
    Router,
    RoutingChange,
    RoutingEvent,
    RoutingState,
    unit_bucket,
)
from infertune.serve.testing import GatedAdapter

KEY = {"X-API-Key": "secret"}
START = RoutingState(stable="a", canary="b", canary_weight=30)


def _router(store: OwnerStore | None = None) -> Router:
    releases = []
    for name in ("a", "b"):
        registry = CollectorRegistry()
        app = create_app(GatedAdapter(), ServePolicy(warmup=False, max_wait_ms=0),
                         registry=registry)
        releases.append(RoutedRelease(name, app, registry))
    return Router(releases, START, api_key="secret", store=store)


class OwnerStore:
    """RayRoutingStore's behaviour in one process: the owner applies, then every router
    adopts the new version before ``change`` returns."""

    def __init__(self, owner: RoutingOwner) -> None:
        self.owner = owner
        self.routers: list[Router] = []
        self.versions: list[int] = []

    async def change(self, change: RoutingChange) -> RoutingEvent:
        outcome = self.owner.change(change)
        if outcome.event is None:
            raise ValueError(outcome.error)
        for router in self.routers:
            router.adopt(outcome.event.state)
        self.versions.append(outcome.version)
        return outcome.event


def test_the_owner_orders_changes_and_refuses_bad_ones() -> None:
    owner = RoutingOwner(START, ["a", "b"])
    assert owner.state() == Versioned(1, START)
    done = owner.change(RoutingChange(action="weight", weight=60, reason="step"))
    assert done.version == 2 and done.event is not None and done.error is None
    assert done.event.kind == "weight" and done.event.subject == "b"
    assert owner.state().state.canary_weight == 60
    refused = owner.change(RoutingChange(action="canary", release="zz"))
    assert refused.event is None and refused.version == 2
    assert refused.error is not None and "'zz' is not loaded" in refused.error
    back = owner.change(RoutingChange(action="rollback"))
    assert back.version == 3 and owner.state().state.canary is None
    nothing = owner.change(RoutingChange(action="weight", weight=5))
    assert nothing.error is not None and nothing.error.startswith("no canary to weigh")
    with pytest.raises(ValueError, match="must differ from the stable"):
        RoutingOwner(RoutingState(stable="a", canary="a"), ["a"])


def test_a_change_through_one_router_is_served_by_both_before_it_answers() -> None:
    store = OwnerStore(RoutingOwner(START, ["a", "b"]))
    one, two = _router(store), _router(store)
    store.routers = [one, two]
    with TestClient(one) as c1, TestClient(two) as c2:
        unit = next(u for u in (f"u{i}" for i in range(1000)) if 30 <= unit_bucket(u) < 60)
        body = {"inputs": ["x"]}
        for client in (c1, c2):
            r = client.post("/v1/predict", json=body, headers={"X-Unit-Id": unit})
            assert r.headers["x-release"] == "a"
        r = c1.post("/admin/routing", json={"action": "weight", "weight": 60}, headers=KEY)
        assert r.status_code == 200 and r.json()["canary_weight"] == 60
        assert two.state.canary_weight == 60 and store.versions == [2]
        for client in (c1, c2):  # the unit moved to the canary on both
            r = client.post("/v1/predict", json=body, headers={"X-Unit-Id": unit})
            assert r.headers["x-release"] == "b"
        r = c2.post("/admin/routing", json={"action": "rollback"}, headers=KEY)
        assert r.status_code == 200 and one.state.canary is None
        refused = c1.post("/admin/routing", json={"action": "weight", "weight": 5},
                          headers=KEY)
        assert refused.status_code == 409 and "no canary to weigh" in refused.json()["error"]
        assert store.versions == [2, 3]  # the refusal changed nothing
        assert c2.get("/admin/routing", headers=KEY).json()["canary"] is None
    with pytest.raises(ValueError, match="'zz' is not loaded"):
        one.adopt(RoutingState(stable="zz"))


def test_replica_metrics_merge_every_replica_and_show_its_routing_version() -> None:
    parts = [("r1", 'infertune_routed_requests_total{release="a"} 3.0\n'),
             ("r2", '# HELP x y\n# TYPE x counter\ninfertune_routed_requests_total'
                    '{release="a"} 4.0\n')]
    merged = labelled_texts(parts, "replica").decode()
    assert 'infertune_routed_requests_total{replica="r1",release="a"} 3.0' in merged
    assert 'infertune_routed_requests_total{replica="r2",release="a"} 4.0' in merged
    signals = [ReplicaSignals("r1", 0, 0, True, routing_version=3, canary_weight=0.0),
               ReplicaSignals("r2", 0, 0, True, routing_version=3, canary_weight=0.0)]
    samples = {(s.name, s.labels.get("replica")): s.value for f in
               text_string_to_metric_families(signals_exposition(signals).decode())
               for s in f.samples}
    assert samples[("infertune_replica_routing_version", "r1")] == 3
    assert samples[("infertune_replica_canary_weight_percent", "r2")] == 0
    plain = signals_exposition([ReplicaSignals("m", 0, 0, True)]).decode()
    assert "routing_version" not in plain  # a single-model deployment has no routing

    async def collect() -> Sequence[ReplicaSignals]:
        return signals

    async def merge() -> bytes:
        return merged.encode()

    async def scrape() -> httpx.Response:
        app = SignalsMiddleware(_router(), collect, merge)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://r") as client:
            return await client.get("/metrics", headers=KEY)

    answer = asyncio.run(scrape())
    assert answer.status_code == 200
    assert int(answer.headers["content-length"]) == len(answer.content)
    assert 'replica="r2",release="a"' in answer.text and "infertune_replicas 2.0" in answer.text
    assert "infertune_release_info" not in answer.text  # the scraped router's own: replaced
