"""Batching, priorities, the bounded queue and deadlines, against a real uvicorn server.

The fake model's forward is held by an Event (``gate``), so every ordering below is decided
by the test, not by timing: a request is "in the model" once ``entered`` is set, and "queued"
once the queue-depth gauge says so. Tests that hold the model set a long policy deadline
(HELD), since the default overload bound would rightly shed requests held that long.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
from conftest import metric, running, wait_until
from prom_counters import change, counters

from infertune.config import ServePolicy
from infertune.serve import create_app
from infertune.serve.testing import GatedAdapter

HELD = 60_000.0  # ms: the policy deadline while a test holds the model


def _post(url: str, inputs: list, **fields) -> httpx.Response:
    return httpx.post(url + "/v1/predict", json={"inputs": inputs, **fields}, timeout=30)


def _queue_in_order(app, pool: ThreadPoolExecutor, url: str, requests: list[tuple],
                    depth: int = 0) -> list:
    """Submit (text, priority) requests one at a time, each after the previous is queued."""
    futures = []
    for text, priority in requests:
        futures.append(pool.submit(_post, url, [text], priority=priority))
        depth += 1
        wait_until(lambda d=depth: metric(app, "infertune_queue_depth") == d, 10)
    return futures


def _hold_model(adapter: GatedAdapter, pool: ThreadPoolExecutor, url: str):
    """Close the gate and put one request into the model; returns its future."""
    adapter.gate.clear()
    adapter.entered.clear()
    adapter.seen.clear()
    blocker = pool.submit(_post, url, ["blocker"])
    assert adapter.entered.wait(10)
    return blocker


def test_concurrent_requests_form_batches_with_similar_lengths() -> None:
    adapter = GatedAdapter()
    # no warm-up, so no fitted padding rule: the rule under test is the length-bucket one. The
    # fake's calls cost microseconds, and the medians of its repeated warm-up batches fit a
    # per-token cost of 0.07 us, which makes padding free and mixes the lengths
    app = create_app(adapter, ServePolicy(max_batch_size=4, max_wait_ms=50, timeout_ms=HELD,
                                          warmup=False))
    with running(app) as url, ThreadPoolExecutor(16) as pool:
        blocker = _hold_model(adapter, pool, url)
        short = [pool.submit(_post, url, [f"s{i}"]) for i in range(6)]
        long = [pool.submit(_post, url, ["x" * 200 + str(i)]) for i in range(2)]
        wait_until(lambda: metric(app, "infertune_queue_depth") == 8, 10)
        adapter.gate.set()
        answers = [f.result() for f in [blocker, *short, *long]]
        assert [a.status_code for a in answers] == [200] * 9
        sizes = [len(batch) for batch in adapter.seen]
        # 1 (blocker), then short texts grouped 4 + 2, long texts together: never mixed
        assert sorted(sizes) == [1, 2, 2, 4]
        for batch in adapter.seen:
            assert len({len(t) > 100 for t in batch}) == 1
        assert metric(app, "infertune_batch_size_count") == 4
        assert metric(app, "infertune_batch_size_bucket", le="1.0") == 1
        timing = answers[1].headers["server-timing"]
        assert timing.startswith("queue;dur=") and "inference;dur=" in timing


def test_high_priority_overtakes_low() -> None:
    adapter = GatedAdapter()
    app = create_app(adapter, ServePolicy(max_batch_size=1, max_wait_ms=0, timeout_ms=HELD))
    with running(app) as url, ThreadPoolExecutor(8) as pool:
        blocker = _hold_model(adapter, pool, url)
        queued = _queue_in_order(app, pool, url, [("low0", "low"), ("low1", "low"),
                                                  ("normal0", "normal"), ("high0", "high")])
        adapter.gate.set()
        assert all(f.result().status_code == 200 for f in [blocker, *queued])
        assert adapter.texts_seen() == ["blocker", "high0", "normal0", "low0", "low1"]


def test_full_queue_answers_429_at_once_and_sheds_low_first() -> None:
    adapter = GatedAdapter()
    policy = ServePolicy(max_batch_size=1, max_wait_ms=0, max_queue=2, timeout_ms=HELD)
    app = create_app(adapter, policy)
    with running(app) as url, ThreadPoolExecutor(8) as pool:
        blocker = _hold_model(adapter, pool, url)
        lows = _queue_in_order(app, pool, url, [("low0", "low"), ("low1", "low")])
        refused = _post(url, ["low-late"], priority="low")  # the model is still held
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) >= 1
        assert "queue full" in refused.json()["error"]
        high = pool.submit(_post, url, ["high0"], priority="high")
        displaced = lows[1].result(timeout=10)  # the newest low request makes room
        assert displaced.status_code == 429 and "higher-priority" in displaced.json()["error"]
        adapter.gate.set()
        assert [f.result().status_code for f in (blocker, lows[0], high)] == [200, 200, 200]
        assert "low1" not in adapter.texts_seen() and "low-late" not in adapter.texts_seen()
        # read back from /metrics, as a scraper sees them (the README's fault table)
        assert {k: v for k, v in change({}, counters(url)).items()
                if k.startswith("infertune_shed_total")} == {
            'infertune_shed_total{reason="queue_full"}': 1,
            'infertune_shed_total{reason="displaced"}': 1}


def test_expired_deadline_is_shed_by_its_timer_before_compute() -> None:
    adapter = GatedAdapter()
    app = create_app(adapter, ServePolicy(max_batch_size=1, max_wait_ms=0, timeout_ms=HELD))
    with running(app) as url, ThreadPoolExecutor(4) as pool:
        blocker = _hold_model(adapter, pool, url)
        late = _post(url, ["needs-an-answer-fast"], timeout_ms=100)
        # answered while the model is still held: the request's own timer shed it
        assert late.status_code == 503
        assert "deadline cannot be met" in late.json()["error"]
        assert not adapter.gate.is_set()
        adapter.gate.set()
        assert blocker.result().status_code == 200
        assert "needs-an-answer-fast" not in adapter.texts_seen()
        assert metric(app, "infertune_shed_total", reason="deadline") == 1


def test_failing_batch_is_rerun_alone_so_only_the_bad_request_fails() -> None:
    adapter = GatedAdapter()
    app = create_app(adapter, ServePolicy(max_batch_size=4, max_wait_ms=50, timeout_ms=HELD))
    with running(app) as url, ThreadPoolExecutor(8) as pool:
        blocker = _hold_model(adapter, pool, url)
        doomed = [pool.submit(_post, url, [t]) for t in ("FAIL-1", "ok-1", "ok-2")]
        wait_until(lambda: metric(app, "infertune_queue_depth") == 3, 10)
        adapter.gate.set()
        assert blocker.result().status_code == 200
        failed = [f.result() for f in doomed]
        assert [r.status_code for r in failed] == [422, 200, 200]
        assert "RuntimeError" in failed[0].json()["error"]
        batch, *alone = adapter.seen[1:]  # the batch, then each request on its own
        assert sorted(batch) == ["FAIL-1", "ok-1", "ok-2"] and alone == [[t] for t in batch]
        after = _post(url, ["ok-after"])
        assert after.status_code == 200 and after.json()["cached"] == [False]
        assert metric(app, "infertune_errors_total", type="batch_RuntimeError") == 1
        assert metric(app, "infertune_errors_total", type="input_RuntimeError") == 1
