"""Cache keys, the LRU's size and TTL, and the Redis layer's failure handling (with a fake
client: the real redis-server is exercised in tests/integration/serve)."""

from __future__ import annotations

import asyncio

from infertune.serve.cache import MISS, LayeredCache, LRUCache, RedisCache, cache_key


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_key_depends_on_model_version_params_and_canonical_input() -> None:
    base = cache_key("m", "v1", {}, {"b": [1, 2], "a": "x"})
    assert base == cache_key("m", "v1", {}, {"a": "x", "b": [1, 2]})  # key order irrelevant
    assert len(base) == 64 and int(base, 16) >= 0
    others = {cache_key("m", "v2", {}, {"a": "x", "b": [1, 2]}),
              cache_key("n", "v1", {}, {"a": "x", "b": [1, 2]}),
              cache_key("m", "v1", {"tier": "fast"}, {"a": "x", "b": [1, 2]}),
              cache_key("m", "v1", {}, {"a": "x", "b": [2, 1]})}
    assert base not in others and len(others) == 4


def test_lru_evicts_least_recent_and_expires_by_ttl() -> None:
    clock = Clock()
    lru = LRUCache(size=2, ttl_s=10, clock=clock)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # a is now most recent
    lru.put("c", 3)
    assert lru.get("b") is MISS and lru.get("a") == 1 and lru.get("c") == 3
    clock.now = 10.0
    assert lru.get("a") is MISS and len(lru) == 1
    assert lru.clear() == 1 and len(lru) == 0
    off = LRUCache(size=0, ttl_s=10, clock=clock)
    off.put("a", 1)
    assert off.get("a") is MISS


class DownRedis:
    """A client whose every call fails like an unreachable server."""

    def __init__(self) -> None:
        self.calls = 0

    async def mget(self, keys):
        self.calls += 1
        raise ConnectionError("refused")

    def pipeline(self, transaction: bool = False):
        self.calls += 1
        raise ConnectionError("refused")


def test_redis_failures_are_counted_and_backed_off() -> None:
    async def scenario() -> None:
        clock = Clock()
        client = DownRedis()
        errors: list[int] = []
        redis = RedisCache(client, ttl_s=60, clock=clock, on_error=lambda: errors.append(1),
                           backoff_s=1.0, max_backoff_s=4.0)
        cache = LayeredCache(LRUCache(8, 60, clock), redis)
        await cache.store([("k", [1.0])])  # LRU keeps it; Redis fails once
        assert await cache.lookup(["k", "z"]) == [[1.0], MISS]  # Redis skipped: backing off
        assert (client.calls, len(errors)) == (1, 1)
        clock.now = 1.0
        assert await cache.lookup(["z"]) == [MISS]
        assert (client.calls, redis.errors) == (2, 2)
        clock.now = 2.5  # backoff doubled to 2 s: still skipped
        await cache.lookup(["z"])
        assert client.calls == 2
        clock.now = 3.0
        await cache.lookup(["z"])
        assert client.calls == 3

    asyncio.run(scenario())


class MemoryRedis:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    async def mget(self, keys):
        return [self.data.get(k) for k in keys]

    def pipeline(self, transaction: bool = False):
        store = self.data

        class Pipe:
            async def __aenter__(self):
                self.ops = []
                return self

            async def __aexit__(self, *exc):
                return False

            def set(self, key, value, px):
                self.ops.append((key, value.encode()))

            async def execute(self):
                store.update(self.ops)

        return Pipe()


def test_redis_hit_fills_the_lru_and_counts_per_layer() -> None:
    async def scenario() -> None:
        clock = Clock()
        seen: list[tuple[str, bool]] = []
        redis = RedisCache(MemoryRedis(), ttl_s=60, clock=clock)
        cache = LayeredCache(LRUCache(8, 60, clock), redis,
                             on_lookup=lambda layer, hit: seen.append((layer, hit)))
        await cache.store([("k", {"label": 1})])
        cache.lru.clear()
        assert await cache.lookup(["k"]) == [{"label": 1}]
        assert await cache.lookup(["k"]) == [{"label": 1}]
        assert seen == [("lru", False), ("redis", True), ("lru", True)]

    asyncio.run(scenario())
