"""The layered cache against a real redis-server: LRU hit, Redis hit after an LRU purge,
version isolation, and serving on through a Redis outage, then reconnecting."""

from __future__ import annotations

import dataclasses

import httpx
from conftest import metric, running, wait_until

from infertune.config import ServePolicy
from infertune.serve import create_app
from infertune.serve.testing import GatedAdapter

KEY = {"X-API-Key": "k3y"}  # purge is an admin route: it always needs the key
ENV = {"SERVE_TEST_KEY": "k3y"}


def _policy(redis_url: str, **fields) -> ServePolicy:
    return ServePolicy(redis_url=redis_url, api_key_env="SERVE_TEST_KEY", **fields)


def _predict(url: str, inputs: list[str]) -> httpx.Response:
    return httpx.post(url + "/v1/predict", json={"inputs": inputs}, timeout=10, headers=KEY)


def _purge(url: str, layer: str, scope: str = "version") -> dict:
    answer = httpx.post(url + "/v1/cache/purge", json={"layer": layer, "scope": scope},
                        timeout=10, headers=KEY)
    assert answer.status_code == 200, answer.text
    assert answer.json()["scope"] == scope
    return answer.json()["purged"]


def test_repeat_is_an_lru_hit_then_a_redis_hit_after_lru_purge(redis_server) -> None:
    adapter = GatedAdapter()
    app = create_app(adapter, _policy(redis_server.url, max_wait_ms=0), environ=ENV)
    with running(app) as url:
        first = _predict(url, ["alpha", "beta"])
        assert first.json()["cached"] == [False, False]
        again = _predict(url, ["alpha", "gamma"])
        assert again.json()["cached"] == [True, False]
        assert again.json()["outputs"][0] == first.json()["outputs"][0]
        assert again.headers["server-timing"].startswith("queue;dur=")
        assert metric(app, "infertune_cache_hits_total", layer="lru") == 1
        assert _purge(url, "lru") == {"lru": 3}
        from_redis = _predict(url, ["alpha"])
        assert from_redis.json() == {**first.json(), "outputs": first.json()["outputs"][:1],
                                     "cached": [True]}
        assert metric(app, "infertune_cache_hits_total", layer="redis") == 1
        assert adapter.texts_seen().count("alpha") == 1  # computed once, served three times

    # a new model version never reads the old version's entries
    newer = GatedAdapter(info=dataclasses.replace(GatedAdapter().info, version="v2"))
    app2 = create_app(newer, _policy(redis_server.url, max_wait_ms=0), environ=ENV)
    with running(app2) as url:
        assert _predict(url, ["alpha"]).json()["cached"] == [False]
        assert metric(app2, "infertune_cache_misses_total", layer="redis") == 1


def test_purge_is_scoped_to_a_version_a_model_or_everything(redis_server) -> None:
    """Two versions of one model and another model share a Redis; each scope deletes only
    its own keys."""
    info = GatedAdapter().info
    apps = {name: create_app(GatedAdapter(info=dataclasses.replace(info, **change)),
                             _policy(redis_server.url, max_wait_ms=0), environ=ENV)
            for name, change in (("v1", {}), ("v2", {"version": "v2"}), ("other", {"id": "o"}))}
    urls = {}
    with running(apps["v1"]) as urls["v1"], running(apps["v2"]) as urls["v2"], \
            running(apps["other"]) as urls["other"]:
        for url in urls.values():
            assert _predict(url, ["a", "b"]).status_code == 200
        no_scope = httpx.post(urls["v1"] + "/v1/cache/purge", json={"layer": "redis"},
                              headers=KEY, timeout=10)
        assert no_scope.status_code == 422 and "scope" in no_scope.json()["error"]
        assert _purge(urls["v1"], "redis", "version") == {"redis": 2}
        assert _purge(urls["v2"], "redis", "version") == {"redis": 2}
        for url in urls.values():
            _predict(url, ["c"])
        assert _purge(urls["v1"], "redis", "model") == {"redis": 2}  # v1 and v2's "c"
        assert _purge(urls["other"], "all", "all") == {"lru": 3, "redis": 3}


def test_redis_outage_keeps_every_request_answered_and_reconnects(redis_server) -> None:
    adapter = GatedAdapter()
    policy = _policy(redis_server.url, max_wait_ms=0, redis_timeout_ms=200)
    app = create_app(adapter, policy, environ=ENV)
    with running(app) as url:
        assert _predict(url, ["before"]).status_code == 200
        redis_server.stop()
        answers = [_predict(url, [f"during-{i % 3}", "before"]) for i in range(12)]
        assert [a.status_code for a in answers] == [200] * 12
        assert answers[-1].json()["cached"] == [True, True]  # the LRU still serves
        assert metric(app, "infertune_cache_errors_total", layer="redis") >= 1
        assert httpx.get(url + "/healthz").status_code == 200

        redis_server.start()  # same port: the client reconnects after its backoff
        probe = iter(range(10_000))

        def redis_serves_again() -> bool:
            text = f"after-{next(probe)}"
            _predict(url, [text])
            _purge(url, "lru")
            return _predict(url, [text]).json()["cached"] == [True]

        wait_until(redis_serves_again, 15, interval=0.1)
