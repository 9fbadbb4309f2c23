"""Bad input, limits, the API key, readiness and the OpenAPI document, on a real server."""

from __future__ import annotations

import json
from typing import Any

import httpx
import numpy as np
import pytest
from conftest import running, wait_until

from infertune.config import ServePolicy
from infertune.errors import ConfigError
from infertune.serve import create_app
from infertune.serve.testing import GatedAdapter

BAD_BODIES = [
    (b'{"inputs": ["a"', 400, "not valid JSON"),
    (b'["a"]', 422, "JSON object"),
    (b'{"inputs": []}', 422, "inputs is empty"),
    (b'{"inputs": "text"}', 422, "valid list"),
    (b'{"inputs": [3]}', 422, "inputs[0] is a number"),
    (b'{"inputs": [{"a": 1}]}', 422, "inputs[0] is an object"),
    (b'{"inputs": ["a"], "priority": "urgent"}', 422, "priority = 'urgent'"),
    (b'{"inputs": ["a"], "timeout_ms": "soon"}', 422, "timeout_ms"),
    (b'{"inputs": ["a"], "timeout_ms": -5}', 422, "timeout_ms"),
    (b'{"inputs": ["a"], "tier": "gold"}', 422, "tier"),
    (b'{"inputs": ["a"], "model": "other"}', 422, "unknown field 'model'"),
    (json.dumps({"inputs": ["x" * 1_000_000]}).encode(), 413, "limit"),
    (json.dumps({"inputs": ["a"] * 65}).encode(), 422, "65 inputs"),
    (json.dumps({"inputs": ["word " * 70]}).encode(), 422, "70 tokens"),
]


def test_bad_requests_get_one_line_4xx_and_the_server_stays_healthy() -> None:
    adapter = GatedAdapter()
    policy = ServePolicy(max_inputs=64, on_long_input="reject", max_wait_ms=0)
    app = create_app(adapter, policy)
    with running(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        for body, status, reason in BAD_BODIES:
            answer = client.post("/v1/predict", content=body,
                                 headers={"content-type": "application/json"})
            assert answer.status_code == status, (body[:60], answer.text)
            message = answer.json()["error"]
            assert reason in message and "\n" not in message
            assert answer.headers["server-timing"].startswith("queue;dur=0.000")
        assert client.get("/healthz").status_code == 200
        good = client.post("/v1/predict", json={"inputs": ["still fine"]})
        assert good.status_code == 200 and len(good.json()["outputs"][0]) == 3
    assert adapter.texts_seen()[-1:] == ["still fine"]  # no bad input reached the model


def test_api_key_guards_every_route_but_health() -> None:
    policy = ServePolicy(api_key_env="SERVE_TEST_KEY", max_wait_ms=0)
    app = create_app(GatedAdapter(), policy, environ={"SERVE_TEST_KEY": "s3cret"})
    with running(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 200
        for method, path in [("POST", "/v1/predict"), ("GET", "/metrics"), ("GET", "/v1/model"),
                             ("POST", "/v1/cache/purge"), ("GET", "/openapi.json")]:
            assert client.request(method, path, json={"inputs": ["a"]}).status_code == 401
        wrong = client.post("/v1/predict", json={"inputs": ["a"]}, headers={"X-API-Key": "no"})
        assert wrong.status_code == 401
        by_header = client.post("/v1/predict", json={"inputs": ["a"]},
                                headers={"X-API-Key": "s3cret"})
        by_bearer = client.post("/v1/cache/purge", json={"scope": "version"},
                                headers={"Authorization": "Bearer s3cret"})
        assert (by_header.status_code, by_bearer.status_code) == (200, 200)


def test_api_key_env_must_be_set() -> None:
    with pytest.raises(ConfigError, match="SERVE_TEST_MISSING"):
        create_app(GatedAdapter(), ServePolicy(api_key_env="SERVE_TEST_MISSING"), environ={})


def test_readyz_waits_for_warmup_and_model_route_and_openapi_match() -> None:
    adapter = GatedAdapter()
    app = create_app(adapter, ServePolicy(max_batch_size=4, timeout_ms=60_000))
    adapter.gate.clear()  # hold warm-up (which starts with the server) in the model
    adapter.entered.clear()
    with running(app, ready=False) as url, httpx.Client(base_url=url, timeout=10) as client:
        assert adapter.entered.wait(10)
        not_ready = client.get("/readyz")
        assert not_ready.status_code == 503 and not_ready.json()["error"] == "warming up"
        assert client.get("/healthz").status_code == 200
        adapter.gate.set()
        wait_until(lambda: client.get("/readyz").status_code == 200, 10)
        # warm-up ran each length bucket at batch sizes 1 and 4
        assert sorted({len(b) for b in adapter.seen}) == [1, 4]
        assert client.get("/v1/model").json()["id"] == "fake"
        schema = client.get("/openapi.json").json()
    documented = {(path, method.upper()) for path, ops in schema["paths"].items() for method in ops}
    served = {(r.path, m) for r in app.routes for m in r.methods if m != "HEAD"}
    assert documented == served


class _NaNOnMarker(GatedAdapter):
    """Outputs NaN for texts that start with NAN (a model that overflowed on them)."""

    def postprocess(self, outputs: Any, inputs: Any) -> list[Any]:
        rows = super().postprocess(outputs, inputs)
        texts = self.seen[-1] if self.seen else []
        return [np.full_like(row, np.nan) if text.startswith("NAN") else row
                for row, text in zip(rows, texts, strict=True)]


def test_a_nan_output_is_a_one_line_500_not_a_null_and_others_are_answered() -> None:
    app = create_app(_NaNOnMarker(), ServePolicy(max_wait_ms=0, cache_size=0))
    with running(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        bad = client.post("/v1/predict", json={"inputs": ["NAN please"]})
        assert bad.status_code == 500
        assert "NaN or infinity" in bad.json()["error"] and "\n" not in bad.json()["error"]
        good = client.post("/v1/predict", json={"inputs": ["fine"]})
        assert good.status_code == 200
        body = good.json()
        assert set(body) == {"outputs", "model", "cached"}  # PredictResponse's shape
        assert body["model"] == {"id": "fake", "version": "v1"} and body["cached"] == [False]
        assert len(body["outputs"][0]) == 3 and all(isinstance(x, float)
                                                   for x in body["outputs"][0])
