"""The router in-process (Starlette's TestClient runs its lifespan): sticky assignment,
headers, replayed comparisons, release-labelled metrics, admin routes behind the key,
feedback, and routing events."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from infertune.config import ServePolicy
from infertune.serve import create_app
from infertune.serve.routing import (
    AgreementRule,
    FeedbackItem,
    RoutedRelease,
    Router,
    RoutingEvent,
    RoutingState,
    unit_bucket,
)
from infertune.serve.testing import FakeRunner, GatedAdapter

KEY = {"X-API-Key": "secret"}


class ReversedRunner(FakeRunner):
    """The fake's probabilities in reverse class order: a different top class."""

    def __call__(self, feeds):  # type: ignore[no-untyped-def]
        return super().__call__(feeds)[:, ::-1].copy()


class Sinks:
    def __init__(self) -> None:
        self.events: list[RoutingEvent] = []
        self.feedback: list[FeedbackItem] = []

    def record_event(self, event: RoutingEvent) -> None:
        self.events.append(event)

    def record_feedback(self, item: FeedbackItem) -> None:
        self.feedback.append(item)


def _release(name: str, runner: FakeRunner | None = None) -> RoutedRelease:
    registry = CollectorRegistry()
    adapter = GatedAdapter(runner=runner or FakeRunner())
    app = create_app(adapter, ServePolicy(warmup=False, max_wait_ms=0), registry=registry)
    return RoutedRelease(name, app, registry, version=f"{name}-v", digest="abc")


def _router(state: RoutingState, sinks: Sinks, api_key: str | None = "secret") -> Router:
    releases = [_release("a"), _release("b", ReversedRunner()), _release("c")]
    return Router(releases, state, api_key=api_key, rule=AgreementRule("top1"), events=sinks,
                  feedback=sinks)


def test_sticky_assignment_follows_the_weight() -> None:
    router = _router(RoutingState(stable="a", canary="b", canary_weight=30), Sinks())
    units = [f"user-{i}" for i in range(4000)]
    first = [router.choose(u) for u in units]
    assert first == [router.choose(u) for u in units]  # sticky
    share = first.count("b") / len(units)
    assert 0.27 < share < 0.33
    router.state = router.state.model_copy(update={"canary_weight": 60})
    again = [router.choose(u) for u in units]
    assert all(b == "b" for a, b in zip(first, again, strict=True) if a == "b")
    assert unit_bucket("user-1") == unit_bucket("user-1")


def test_predict_headers_comparisons_metrics_and_feedback() -> None:
    sinks = Sinks()
    router = _router(RoutingState(stable="a", canary="b", canary_weight=50, shadow="c"), sinks)
    with TestClient(router) as client:
        assert [e.kind for e in sinks.events] == ["start"]
        by_release: dict[str, list[str]] = {"a": [], "b": []}
        for i in range(40):
            r = client.post("/v1/predict", json={"inputs": [f"text {i}", f"other {i}"]},
                            headers={"X-Unit-Id": f"u{i}", **KEY})
            assert r.status_code == 200, r.text
            by_release[r.headers["x-release"]].append(r.headers["x-request-id"])
        assert by_release["a"] and by_release["b"]
        reused = client.post("/v1/predict", json={"inputs": ["x"]},
                             headers={"X-Request-Id": "my-id-1", "X-Unit-Id": "u1", **KEY})
        assert reused.headers["x-request-id"] == "my-id-1"
        ok = client.post("/v1/feedback", headers=KEY, json={
            "request_id": by_release["b"][0], "metric": "conversion", "value": 1})
        assert ok.status_code == 200 and ok.json() == {"recorded": True, "release": "b"}
        unknown = client.post("/v1/feedback", headers=KEY, json={
            "request_id": "nope", "metric": "conversion", "value": 1})
        assert unknown.status_code == 404 and "unknown" in unknown.json()["error"]
        bad = client.post("/v1/feedback", headers=KEY, json={
            "request_id": by_release["a"][0], "metric": "conversion", "value": 7})
        assert bad.status_code == 422 and "value" in bad.json()["error"]
        assert client.post("/v1/feedback", json={}).status_code == 401
        assert client.get("/metrics").status_code == 401
        assert "infertune_release_info" in client.get("/metrics", headers=KEY).text
    text = router.exposition().decode()  # after shutdown, which waits for pending replays
    families = {f.name: f for f in text_string_to_metric_families(text)}
    requests = {(s.labels["release"], s.labels["status"]): s.value
                for s in families["infertune_requests"].samples if s.name.endswith("_total")}
    n_b = len(by_release["b"])
    # the stable answered its own share plus a replay of every canary answer
    assert requests[("b", "200")] == n_b
    assert requests[("a", "200")] == 41 - n_b + n_b
    # ...but its latency histograms hold its own answers only: a replay arrives just after
    # the canary's answer, a different traffic from the stable's (rollout/gates.py)
    for family in ("infertune_request_seconds", "infertune_model_request_seconds"):
        counts = {s.labels["release"]: s.value for s in families[family].samples
                  if s.name.endswith("_count")}
        assert counts["a"] == 41 - n_b and counts["b"] == n_b, (family, counts)
    rows = {(s.labels["release"], s.labels["outcome"]): s.value
            for s in families["infertune_shadow_rows"].samples if s.name.endswith("_total")}
    # the reversed fake disagrees on the top class for each compared row; c equals a
    assert rows.get(("b", "disagree"), 0) + rows.get(("b", "agree"), 0) == 2 * n_b
    assert rows[("b", "disagree")] > 0
    assert rows[("c", "agree")] == 2 * (40 - n_b) + 1 and ("c", "disagree") not in rows
    info = {s.labels["release"]: s.labels["role"] for s in
            families["infertune_release_info"].samples}
    assert info == {"a": "stable", "b": "canary", "c": "shadow"}
    assert [(f.release, f.metric, f.value) for f in sinks.feedback] == [("b", "conversion", 1)]


def test_admin_routes_need_the_key_and_validate_changes() -> None:
    sinks = Sinks()
    router = _router(RoutingState(stable="a", canary="b", canary_weight=5), sinks)
    with TestClient(router) as client:
        assert client.get("/admin/routing").status_code == 401
        assert client.post("/admin/routing", headers={"X-API-Key": "wrong"},
                           json={"action": "rollback"}).status_code == 401
        r = client.post("/admin/routing", headers=KEY, json={"action": "weight", "weight": 25})
        assert r.status_code == 200 and r.json()["canary_weight"] == 25
        r = client.post("/admin/routing", headers=KEY, json={"action": "weight", "weight": 250})
        assert r.status_code == 422
        r = client.post("/admin/routing", headers=KEY, json={"action": "fly"})
        assert r.status_code == 422 and "routing change" in r.json()["error"]
        r = client.post("/admin/routing", headers=KEY, json={"action": "rollback",
                                                             "reason": "manual"})
        assert r.json()["canary"] is None
        assert client.post("/v1/predict", json={"inputs": ["x"]},
                           headers=KEY).headers["x-release"] == "a"
        r = client.post("/admin/routing", headers=KEY, json={"action": "rollback"})
        assert r.status_code == 409 and "nothing to roll back" in r.json()["error"]
        r = client.post("/admin/routing", headers=KEY, json={"action": "canary", "release": "z"})
        assert r.status_code == 409 and "not loaded" in r.json()["error"]
        client.post("/admin/routing", headers=KEY, json={"action": "canary", "release": "c",
                                                         "weight": 100})
        client.post("/admin/routing", headers=KEY, json={"action": "promote"})
        assert client.get("/admin/routing", headers=KEY).json() == {
            "stable": "c", "canary": None, "canary_weight": 0.0, "shadow": None,
            "previous_stable": "a"}
        back = client.post("/admin/routing", headers=KEY, json={"action": "rollback"}).json()
        assert back["stable"] == "a"
    assert [e.kind for e in sinks.events] == ["start", "weight", "rollback", "canary",
                                              "promote", "rollback"]
    assert sinks.events[2].subject == "b" and sinks.events[2].reason == "manual"
    assert sinks.events[-1].subject == "c"


def test_admin_routes_are_closed_without_a_key_and_bad_states_refused() -> None:
    router = _router(RoutingState(stable="a"), Sinks(), api_key=None)
    with TestClient(router) as client:
        r = client.get("/admin/routing")
        assert r.status_code == 403 and "api_key_env" in r.json()["error"]
        assert client.get("/readyz").json()["releases"] == ["a", "b", "c"]
        assert client.get("/healthz").status_code == 200
        too_big = client.post("/v1/predict", content=b"x" * 2_000_001)
        assert too_big.status_code == 413
    with pytest.raises(ValueError, match="not loaded"):
        _router(RoutingState(stable="zz"), Sinks())
    with pytest.raises(ValueError, match="must differ"):
        _router(RoutingState(stable="a", canary="a"), Sinks())


def test_agreement_rule() -> None:
    cos = AgreementRule("cosine", 0.99)
    assert cos.agrees([1.0, 2.0], [1.0, 2.001]) and not cos.agrees([1.0, 0.0], [0.0, 1.0])
    assert not cos.agrees([1.0, 2.0], [1.0, 2.0, 3.0])
    top = AgreementRule("top1")
    assert top.agrees(np.array([0.1, 0.9]), [0.4, 0.6]) and not top.agrees([0.9, 0.1], [0, 1])
