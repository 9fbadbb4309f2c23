"""Property-based: arbitrary JSON bodies, raw bytes and headers sent to the app through
Starlette's in-process transport. Every answer is 2xx or 4xx, every 4xx is a one-line JSON
error, and the server is still healthy (and still answers a good request) afterwards."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from infertune.config import ServePolicy
from infertune.serve import create_app
from infertune.serve.testing import GatedAdapter

# ~400 requests per key setting, about 15 s in all; status codes only, nothing timed
pytestmark = [pytest.mark.slow, pytest.mark.timing_free]
KEY = "k3y"
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=16)
FIELDS = {"priority": JSON | st.sampled_from(["high", "normal", "low"]),
          "timeout_ms": JSON | st.floats(min_value=0.001, max_value=1e6),
          "tier": JSON | st.sampled_from(["fast", "standard", "quality"])}
PREDICT = st.fixed_dictionaries({"inputs": st.lists(st.text(max_size=40) | JSON, max_size=5)},
                                optional=FIELDS)
BODIES = st.one_of(
    PREDICT.map(lambda v: json.dumps(v).encode()),  # ensure_ascii: lone surrogates as \udXXX
    JSON.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=300),
    st.integers(1, 5000).map(lambda depth: b'{"inputs": ' + b"[" * depth + b"]" * depth + b"}"),
    st.sampled_from([b'{"inputs": ["a"], "timeout_ms": 1e999}', b'{"inputs": [NaN]}',
                     b'{"inputs": ["\\ud800"]}', b'{"inputs": ["a"]}', b"{}", b"null"]),
)
HEADER_NAMES = st.sampled_from(["content-type", "x-api-key", "authorization", "accept",
                                "x-request-id", "content-encoding", "user-agent"])
HEADERS = st.dictionaries(HEADER_NAMES, st.text(st.characters(min_codepoint=32,
                                                              max_codepoint=126), max_size=40)
                          | st.sampled_from([f"Bearer {KEY}", KEY]), max_size=4)


@pytest.fixture(scope="module", params=["open", "keyed"])
def client(request: pytest.FixtureRequest) -> Iterator[TestClient]:
    keyed = request.param == "keyed"
    policy = ServePolicy(max_wait_ms=0, max_inputs=4,
                         api_key_env="SERVE_TEST_KEY" if keyed else None)
    app = create_app(GatedAdapter(), policy, environ={"SERVE_TEST_KEY": KEY})
    with TestClient(app, raise_server_exceptions=True) as test_client:
        test_client.headers.update({"X-API-Key": KEY} if keyed else {})
        yield test_client


def _assert_clean(answer: Any) -> None:
    assert 200 <= answer.status_code < 300 or 400 <= answer.status_code < 500, answer.text
    assert answer.headers["server-timing"].startswith("queue;dur=")
    if answer.status_code >= 400:
        message = answer.json()["error"]
        assert isinstance(message, str) and message and len(message.splitlines()) == 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=BODIES, headers=HEADERS)
def test_any_body_and_headers_get_a_2xx_or_a_one_line_4xx(client: TestClient, body: bytes,
                                                          headers: dict[str, str]) -> None:
    for path in ("/v1/predict", "/v1/cache/purge"):
        _assert_clean(client.post(path, content=body, headers=headers))


@settings(max_examples=40, deadline=None)
@given(path=st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=30),
       method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]))
def test_any_route_and_method_answers_json(client: TestClient, path: str, method: str) -> None:
    _assert_clean(client.request(method, "/" + path.lstrip("/")))


def test_the_server_is_healthy_after_the_hostile_traffic(client: TestClient) -> None:
    assert client.get("/healthz").status_code == 200
    good = client.post("/v1/predict", json={"inputs": ["still fine"]})
    assert good.status_code == 200 and len(good.json()["outputs"][0]) == 3
    purge = client.post("/v1/cache/purge", json={"scope": "version"})
    keyed = "x-api-key" in client.headers
    assert purge.status_code == (200 if keyed else 403), purge.text
    if not keyed:
        assert "--api-key-env" in purge.json()["error"]
