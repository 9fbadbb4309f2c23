"""Cascade and tiers over HTTP: the fast model answers confident inputs, the rest reach the
full model; `fast` and `quality` pin one model."""

from __future__ import annotations

import dataclasses

import httpx
from conftest import running

from infertune.config import ServePolicy
from infertune.serve import create_app
from infertune.serve.cascade import confidence
from infertune.serve.testing import GatedAdapter


def test_cascade_routes_by_confidence_and_tier() -> None:
    full = GatedAdapter()
    fast = GatedAdapter(info=dataclasses.replace(GatedAdapter().info, id="fast-fake"))
    texts = [f"question {i}" for i in range(12)]
    scores = [confidence(out, "probability") for out in fast.predict(texts)]
    threshold = sorted(scores)[6]  # about half pass
    policy = ServePolicy(cascade_threshold=threshold, max_wait_ms=0, warmup=False)
    app = create_app(full, policy, fast_adapter=fast)
    with running(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        fast.seen.clear()
        answer = client.post("/v1/predict", json={"inputs": texts, "tier": "standard"})
        assert answer.status_code == 200
        unsure = [t for t, s in zip(texts, scores, strict=True) if s < threshold]
        assert 0 < len(unsure) < len(texts)
        assert full.texts_seen() == unsure
        assert fast.texts_seen() == texts
        full.seen.clear()
        client.post("/v1/predict", json={"inputs": ["only fast"], "tier": "fast"})
        client.post("/v1/predict", json={"inputs": ["only full"], "tier": "quality"})
        assert full.texts_seen() == ["only full"]
        assert fast.texts_seen()[-1] == "only fast"
        # the tier is part of the cache key: the same text per tier is computed separately
        again = client.post("/v1/predict", json={"inputs": ["only fast"], "tier": "quality"})
        assert again.json()["cached"] == [False]
