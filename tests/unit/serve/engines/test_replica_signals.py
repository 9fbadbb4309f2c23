"""The Ray replica's /metrics: the serving app's own series plus every replica's scale-out
signals, appended only to a successful answer; every other route passes through untouched."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import httpx
from prometheus_client.parser import text_string_to_metric_families

from infertune.config import ServePolicy
from infertune.serve import create_app
from infertune.serve.engines.replica import ReplicaSignals, SignalsMiddleware, signals_exposition
from infertune.serve.testing import GatedAdapter

SIGNALS = [ReplicaSignals("a1", queue_depth=3, ongoing_requests=7, ready=True),
           ReplicaSignals("b2", queue_depth=0, ongoing_requests=1, ready=True)]


async def _collect() -> Sequence[ReplicaSignals]:
    return SIGNALS


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_exposition_names_every_replica() -> None:
    samples = _samples(signals_exposition(SIGNALS).decode())
    assert samples[("infertune_replicas", ())] == 2
    assert samples[("infertune_replica_queue_depth", (("replica", "a1"),))] == 3
    assert samples[("infertune_replica_ongoing_requests", (("replica", "b2"),))] == 1
    assert _samples(signals_exposition([]).decode())[("infertune_replicas", ())] == 0


async def _get(app: SignalsMiddleware, path: str, **kwargs: object) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://replica") as client:
        return await client.request(kwargs.pop("method", "GET"), path,  # type: ignore[arg-type]
                                    **kwargs)  # type: ignore[arg-type]


def test_metrics_gets_the_signals_appended_with_a_correct_length() -> None:
    app = SignalsMiddleware(create_app(GatedAdapter(), ServePolicy(warmup=False)), _collect)
    answer = asyncio.run(_get(app, "/metrics"))
    assert answer.status_code == 200
    assert int(answer.headers["content-length"]) == len(answer.content)
    assert answer.headers["server-timing"].startswith("queue;dur=0.000")
    samples = _samples(answer.text)
    assert ("infertune_queue_depth", ()) in samples  # the app's own series stay
    assert samples[("infertune_replicas", ())] == 2


def test_other_routes_and_refused_metrics_are_untouched() -> None:
    inner = create_app(GatedAdapter(), ServePolicy(warmup=False, api_key_env="K"),
                       environ={"K": "s3cret"})
    app = SignalsMiddleware(inner, _collect)
    refused = asyncio.run(_get(app, "/metrics"))
    assert refused.status_code == 401 and "infertune_replicas" not in refused.text
    assert "error" in refused.json()
    keyed = asyncio.run(_get(app, "/metrics", headers={"X-API-Key": "s3cret"}))
    assert keyed.status_code == 200 and "infertune_replicas 2.0" in keyed.text
    health = asyncio.run(_get(app, "/healthz"))
    assert health.json() == {"status": "alive"}
    bad = asyncio.run(_get(app, "/metrics", method="POST", headers={"X-API-Key": "s3cret"}))
    assert bad.status_code == 405 and "infertune_replicas" not in bad.text
