"""Fault-table rows tested in-process, read back from /metrics as a scraper sees them: a
request reaching a closed queue (SIGTERM's row: the lifespan's shutdown closes the runtime's
queue first) and a text input over max_input_chars (the "too long" row; the fault server of
test_serve_fault_metrics.py serves a tensor model, whose rows have no length limit)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from conftest import running
from prom_counters import change, counters

from infertune.config import ServePolicy
from infertune.serve import create_app
from infertune.serve.testing import GatedAdapter


@pytest.fixture
def served() -> Iterator[tuple[object, str]]:
    app = create_app(GatedAdapter(), ServePolicy(max_wait_ms=0, max_input_chars=10,
                                                 cache_size=0))
    with running(app) as url:
        yield app, url


def test_a_request_reaching_a_closed_queue_is_503_and_counted_shutting_down(served) -> None:
    app, url = served
    before = counters(url)
    assert httpx.post(url + "/v1/predict", json={"inputs": ["alpha"]}, timeout=10
                      ).status_code == 200
    app.state.runtime.queue.close()  # what shutdown does first (ServeRuntime.stop)
    answer = httpx.post(url + "/v1/predict", json={"inputs": ["beta"]}, timeout=10)
    assert answer.status_code == 503
    assert answer.json()["error"] == ("server is shutting down; retry on another replica")
    assert answer.headers["retry-after"] == "1"
    assert change(before, counters(url)) == {
        'infertune_requests_total{status="200"}': 1,
        'infertune_requests_total{status="503"}': 1,
        'infertune_shed_total{reason="shutting_down"}': 1}


def test_a_text_over_max_input_chars_is_422_and_counted_invalid(served) -> None:
    _, url = served
    before = counters(url)
    answer = httpx.post(url + "/v1/predict", json={"inputs": ["x" * 11]}, timeout=10)
    assert answer.status_code == 422
    assert answer.json()["error"] == ("inputs[0] has 11 characters; the limit is 10; shorten "
                                      "it")
    assert change(before, counters(url)) == {
        'infertune_requests_total{status="422"}': 1,
        'infertune_errors_total{type="invalid_request"}': 1}
