"""A Redis that hangs costs a lookup at most `redis_timeout_ms`, measured: the lookup's wait
against a real redis-server stopped with SIGSTOP, and against a socket that accepts and never
answers; then Redis is skipped for its backoff, so the next lookup does not wait at all, and
each failure is one cache error (the README's fault table, row "Redis hangs")."""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from conftest import metric, running

from infertune.config import ServePolicy
from infertune.serve import create_app
from infertune.serve.cache import MISS, LayeredCache, LRUCache, RedisCache, redis_client
from infertune.serve.testing import GatedAdapter

TIMEOUT_S = 0.5  # redis_timeout_ms=500
# what a busy 2-core machine adds to a 500 ms socket timeout: event-loop and scheduler delay.
# Below one more timeout, so a lookup that waited for two (a retry, a reconnect) fails the
# bound; with a 200 ms timeout and 250 ms of slack, two timeouts (400 ms) passed it.
SLACK_S = 0.3
assert TIMEOUT_S + SLACK_S < 2 * TIMEOUT_S


def _cache(url: str, errors: list[int]) -> LayeredCache:
    redis = RedisCache(redis_client(url, TIMEOUT_S), ttl_s=60, clock=time.monotonic,
                       on_error=lambda: errors.append(1), backoff_s=1.0)
    return LayeredCache(LRUCache(0, 60, time.monotonic), redis)


async def _timed_lookups(cache: LayeredCache, before_second: float = 0.0) -> list[float]:
    waits = []
    for key in ("k1", "k2"):
        t0 = time.perf_counter()
        assert await cache.lookup([key]) == [MISS]
        waits.append(time.perf_counter() - t0)
        await asyncio.sleep(before_second)
    assert cache.redis is not None
    await cache.redis.close()
    return waits


@pytest.mark.slow
def test_a_stopped_redis_costs_one_lookup_at_most_the_timeout(redis_server) -> None:
    errors: list[int] = []

    async def run() -> list[float]:
        cache = _cache(redis_server.url, errors)
        assert await cache.lookup(["warm"]) == [MISS]  # connected, answered: a plain miss
        assert errors == []
        redis_server.proc.send_signal(signal.SIGSTOP)
        try:
            return await _timed_lookups(cache)
        finally:
            redis_server.proc.send_signal(signal.SIGCONT)

    hung, skipped = asyncio.run(run())
    assert TIMEOUT_S * 0.9 <= hung <= TIMEOUT_S + SLACK_S, hung  # waited for the timeout only
    assert skipped < 0.05, skipped  # within the backoff: Redis is not asked
    assert errors == [1]


@pytest.fixture
def black_hole() -> Iterator[str]:
    """A TCP port that accepts connections and never sends a byte."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.slow
def test_a_socket_that_never_answers_costs_at_most_the_timeout(black_hole) -> None:
    errors: list[int] = []
    hung, skipped = asyncio.run(_timed_lookups(_cache(black_hole, errors)))
    assert TIMEOUT_S * 0.9 <= hung <= TIMEOUT_S + SLACK_S, hung
    assert skipped < 0.05, skipped
    assert errors == [1]


@pytest.mark.slow
def test_serve_with_a_hung_redis_answers_within_the_timeout(black_hole) -> None:
    """The same bound through the served app: ServePolicy.redis_timeout_ms is the socket
    timeout the runtime gives its Redis client, so a request waits for Redis at most that long
    and is answered from the model; the failure is counted on /metrics."""
    app = create_app(GatedAdapter(), ServePolicy(redis_url=black_hole,
                                                 redis_timeout_ms=TIMEOUT_S * 1000,
                                                 max_wait_ms=0, cache_size=0))
    with running(app) as url:
        t0 = time.perf_counter()
        answer = httpx.post(url + "/v1/predict", json={"inputs": ["alpha"]}, timeout=10)
        took = time.perf_counter() - t0
        assert answer.status_code == 200 and answer.json()["cached"] == [False]
        assert took <= TIMEOUT_S + SLACK_S, took  # one Redis timeout, a fake model, HTTP
        assert metric(app, "infertune_cache_errors_total", layer="redis") == 1
        assert metric(app, "infertune_cache_misses_total", layer="redis") == 1
