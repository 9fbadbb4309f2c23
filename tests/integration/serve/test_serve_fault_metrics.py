"""The rows of the fault table (docs/serve-faults.md, "What a client sees and what the
metrics show, per fault"), against a real `infertune serve` on the fault model
(tests/helpers/serve_fault_models.py), with the status the client sees and the exact change
of the counters read back from /metrics. Elsewhere, each beside the test that injects its
fault: the worker-death row in test_serve_model_processes.py, the Redis rows in
test_serve_cache_redis.py (its counters) and test_serve_redis_hang.py (the measured bound of
one lookup's wait), SIGTERM's shutting_down and a text over max_input_chars in
test_serve_shed_metrics.py, displaced and queue_full in test_serve_batching.py. These share
one server (20 ms per batch, LRU off so every request reaches the model, a 300 ms deadline, a
queue of 3)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from prom_counters import change, counters
from serve_fault_procs import ServeProcess  # tests/helpers

pytestmark = [pytest.mark.slow, pytest.mark.timing_free]

POLICY = {"body_timeout_s": 1, "cache_size": 0, "max_request_bytes": 2048, "timeout_ms": 300,
          "max_queue": 3, "workers": 1}
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    process = ServeProcess(tmp_path_factory.mktemp("serve"), service_ms=20, stall_s=1.5,
                           max_wait_ms=1, policy=POLICY)
    with process.running():
        yield process


def _post(server: ServeProcess, **kwargs: object) -> tuple[httpx.Response, dict[str, float]]:
    """One request alone, and the counters it moved (read once it was answered)."""
    before = counters(server.url)
    answer = httpx.post(server.url + "/v1/predict", timeout=10, **kwargs)
    return answer, change(before, counters(server.url))


def _error(answer: httpx.Response) -> str:
    text = answer.json()["error"]
    assert "\n" not in text and "Traceback" not in text
    return str(text)


def test_a_healthy_request_moves_only_requests_200(server) -> None:
    answer, moved = _post(server, json={"inputs": [[1, 2, 3, 4]]})
    assert answer.status_code == 200 and answer.json()["outputs"] == [[2, 4, 6, 8]]
    assert moved == {'infertune_requests_total{status="200"}': 1}


INVALID = {'infertune_errors_total{type="invalid_request"}': 1}


@pytest.mark.parametrize("body, status, says", [
    (b"{nope", 400, "body is not valid JSON"),
    (b'{"inputs": [[NaN, 0, 0, 0]]}', 400, "NaN is not a number JSON allows here"),
    (b'{"inputs": [[1e999, 0, 0, 0]]}', 400, "number 1e999 is out of range"),
    (b'{"inputs": ' + b"[" * 40 + b"]" * 40 + b"}", 400,
     "body nests 41 levels deep; the limit is 32"),
    (b'{"inputs": ["\\ud800"]}', 400, "inputs[0] has an invalid Unicode escape"),
    (b'{"inputs": ["\xff"]}', 400, "body is not UTF-8 (byte 13)"),
    (b'{"inputs": "abc"}', 422, "inputs = 'abc': Input should be a valid list"),
    (b'{"inputs": [' + b",".join([b"[1, 2, 3, 4]"] * 65) + b"]}", 422,
     "65 inputs in one request; the limit is 64"),
    (b'{"inputs": [' + b",".join([b"[1.0, 2.0, 3.0, 4.0]"] * 200) + b"]}", 413,
     "the limit is 2048"),
])
def test_malformed_and_invalid_bodies(server, body: bytes, status: int, says: str) -> None:
    answer, moved = _post(server, content=body, headers=JSON)
    assert answer.status_code == status and says in _error(answer)
    assert moved == {f'infertune_requests_total{{status="{status}"}}': 1, **INVALID}


def test_a_body_trickled_past_body_timeout_s_is_408(server) -> None:
    before = counters(server.url)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
                     b"\r\nContent-Length: 100\r\n\r\n{\"in")  # 4 of 100 bytes, then nothing
        head = sock.recv(64)
    assert head.startswith(b"HTTP/1.1 408"), head
    assert change(before, counters(server.url)) == {
        'infertune_requests_total{status="408"}': 1, **INVALID}


def test_the_model_raising_on_an_input_fails_that_request_with_422(server) -> None:
    answer, moved = _post(server, json={"inputs": [[-1, 0, 0, 0]]})
    assert answer.status_code == 422
    assert "the model raised ValueError on this request's 1 input(s)" in _error(answer)
    assert moved == {'infertune_requests_total{status="422"}': 1,
                     'infertune_errors_total{type="batch_ValueError"}': 1,
                     'infertune_errors_total{type="input_ValueError"}': 1}


def test_the_model_returning_the_wrong_number_of_outputs_is_500(server) -> None:
    answer, moved = _post(server, json={"inputs": [[-2, 0, 0, 0], [1, 0, 0, 0]]})
    assert answer.status_code == 500
    assert _error(answer) == "the model returned 1 outputs for 2 inputs"
    assert moved == {'infertune_requests_total{status="500"}': 1,
                     'infertune_errors_total{type="batch_OutputCountMismatch"}': 1}


async def _stall_then_burst(url: str, n: int) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=10) as client:
        stalled = asyncio.create_task(client.post(url, json={"inputs": [[9, 0, 0, 0]]}))
        await asyncio.sleep(0.2)  # the stalled batch holds the one worker for 1.5 s
        rest = [client.post(url, json={"inputs": [[10.0 + i, 0, 0, 0]]}) for i in range(n)]
        return list(await asyncio.gather(stalled, *rest))


def test_a_stalled_call_and_the_burst_behind_it_are_shed_and_counted(server) -> None:
    before = counters(server.url)
    answers = asyncio.run(_stall_then_burst(server.url + "/v1/predict", 8))
    time.sleep(0.5)  # the stalled call returns after its request was answered 503
    moved = change(before, counters(server.url))
    stalled, rest = answers[0], answers[1:]
    # the stalled request: 503 at its deadline plus one batch time, counted as a model timeout
    assert stalled.status_code == 503 and "no answer by this request's deadline" in _error(
        stalled)
    assert stalled.elapsed.total_seconds() < 1.2  # 300 ms deadline, not the 1.5 s stall
    # behind it: a queue of 3, so at least 5 of 8 find it full (429, Retry-After); the queued
    # ones are shed by their deadline, or refused at once as overload (503)
    full = [a for a in rest if a.status_code == 429]
    shed = [a for a in rest if a.status_code == 503]
    assert len(full) >= 5 and len(full) + len(shed) == 8, [a.status_code for a in rest]
    assert all("queue full (3 requests waiting)" in _error(a) and a.headers["retry-after"]
               for a in full)
    deadline = sum(1 for a in shed if "deadline" in _error(a))
    overload = sum(1 for a in shed if _error(a).startswith("overloaded"))
    assert deadline + overload == len(shed)
    expected = {'infertune_requests_total{status="503"}': 1 + len(shed),
                'infertune_requests_total{status="429"}': len(full),
                'infertune_shed_total{reason="queue_full"}': len(full),
                'infertune_errors_total{type="model_timeout"}': 1}
    if deadline:
        expected['infertune_shed_total{reason="deadline"}'] = deadline
    if overload:
        expected['infertune_shed_total{reason="overload"}'] = overload
    assert moved == expected
    assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200
