"""The layered output cache: an in-process LRU, then Redis as the shared second layer.

A key is the SHA-256 of (model id, model version, the request parameters that change the
output, the canonical JSON of one input). The version is a content hash of the model files,
so a new model version computes new keys and can never read the old version's entries.

In Redis a key lives under ``infertune:cache:<model token>:<version token>:`` (tokens are hex
digests of the model id and version, so no glob character can reach a SCAN pattern), which is
what lets a purge be scoped to one version, one model, or everything.

Redis is optional and never on the critical path: every call has a short socket timeout; a
failure is counted, and the layer is skipped for a backoff interval (doubling up to a cap)
before the next try, so a dead Redis costs one timeout per interval, not one per request.
redis-py reconnects by itself on the next command once the server is back.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Literal

MISS: Any = object()  # outputs may be any JSON value, so a miss is a sentinel, not None
REDIS_PREFIX = "infertune:cache:"
PurgeScope = Literal["version", "model", "all"]


def _token(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def cache_key(model_id: str, version: str, params: dict[str, Any], item: Any) -> str:
    """Hex SHA-256 of the model identity, output-changing params and the canonical input."""
    canonical = json.dumps([model_id, version, params, item], sort_keys=True,
                           separators=(",", ":"), ensure_ascii=False, allow_nan=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


class LRUCache:
    """Bounded in-process LRU with a per-entry TTL on the injected clock."""

    def __init__(self, size: int, ttl_s: float, clock: Callable[[], float]) -> None:
        self.size = size
        self.ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> Any:
        entry = self._entries.get(key)
        if entry is None:
            return MISS
        expires, value = entry
        if self._clock() >= expires:
            del self._entries[key]
            return MISS
        self._entries.move_to_end(key)
        return value

    def put(self, key: str, value: Any) -> None:
        if self.size <= 0:
            return
        self._entries[key] = (self._clock() + self.ttl_s, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def clear(self) -> int:
        n = len(self._entries)
        self._entries.clear()
        return n


class RedisCache:
    """The shared layer on a ``redis.asyncio.Redis`` client; failures never raise."""

    def __init__(self, client: Any, ttl_s: float, clock: Callable[[], float], *,
                 on_error: Callable[[], None] = lambda: None,
                 backoff_s: float = 0.05, max_backoff_s: float = 2.0,
                 model_id: str = "", version: str = "") -> None:
        self.client = client
        self._model_prefix = f"{REDIS_PREFIX}{_token(model_id)}:"
        self._prefix = f"{self._model_prefix}{_token(version)}:"
        self.ttl_s = ttl_s
        self._clock = clock
        self._on_error = on_error
        self._base_backoff = backoff_s
        self._max_backoff = max_backoff_s
        self._backoff = backoff_s
        self._down_until = 0.0
        self.errors = 0

    @property
    def available(self) -> bool:
        """False during a backoff interval after a failure."""
        return self._clock() >= self._down_until

    async def get_many(self, keys: Sequence[str]) -> list[Any]:
        if not keys or not self.available:
            return [MISS] * len(keys)
        try:
            raw = await self.client.mget([self._prefix + k for k in keys])
        except Exception:  # noqa: BLE001 - any client/network error: serve without Redis
            self._failed()
            return [MISS] * len(keys)
        self._succeeded()
        return [MISS if value is None else json.loads(value) for value in raw]

    async def put_many(self, pairs: Sequence[tuple[str, Any]]) -> None:
        if not pairs or not self.available:
            return
        ttl_ms = int(self.ttl_s * 1000)
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                for key, value in pairs:
                    pipe.set(self._prefix + key, json.dumps(value), px=ttl_ms)
                await pipe.execute()
        except Exception:  # noqa: BLE001 - a failed write only costs a future miss
            self._failed()
            return
        self._succeeded()

    async def purge(self, scope: PurgeScope) -> int:
        """Delete this version's, this model's or every model's entries (``scope``); the
        count deleted, or -1 when Redis is unreachable."""
        prefix = {"version": self._prefix, "model": self._model_prefix, "all": REDIS_PREFIX}[scope]
        try:
            keys = [k async for k in self.client.scan_iter(match=prefix + "*", count=500)]
            if keys:
                await self.client.delete(*keys)
        except Exception:  # noqa: BLE001
            self._failed()
            return -1
        self._succeeded()
        return len(keys)

    async def close(self) -> None:
        try:
            await self.client.aclose()
        except Exception:  # noqa: BLE001 - closing a dead connection may fail; nothing to do
            pass

    def _failed(self) -> None:
        self.errors += 1
        self._on_error()
        self._down_until = self._clock() + self._backoff
        self._backoff = min(self._backoff * 2, self._max_backoff)

    def _succeeded(self) -> None:
        self._backoff = self._base_backoff


def redis_client(url: str, timeout_s: float) -> Any:
    """A redis.asyncio client with short timeouts, so a dead server costs milliseconds."""
    # imported on use: redis.asyncio takes about 0.1 s to import, only a Redis-backed cache
    # needs it, and every serve process and the CLI load this module
    import redis.asyncio as aioredis

    return aioredis.Redis.from_url(url, socket_timeout=timeout_s,
                                   socket_connect_timeout=timeout_s, retry_on_timeout=False)


class LayeredCache:
    """LRU first, then Redis; a Redis hit is copied into the LRU.

    ``on_lookup(layer, hit)`` is called once per input and layer consulted, for metrics.
    """

    def __init__(self, lru: LRUCache, redis: RedisCache | None,
                 on_lookup: Callable[[str, bool], None] = lambda layer, hit: None) -> None:
        self.lru = lru
        self.redis = redis
        self._on_lookup = on_lookup

    async def lookup(self, keys: Sequence[str]) -> list[Any]:
        found = [self.lru.get(k) for k in keys]
        for value in found:
            self._on_lookup("lru", value is not MISS)
        missing = [i for i, value in enumerate(found) if value is MISS]
        if missing and self.redis is not None and self.redis.available:
            remote = await self.redis.get_many([keys[i] for i in missing])
            for i, value in zip(missing, remote, strict=True):
                self._on_lookup("redis", value is not MISS)
                if value is not MISS:
                    found[i] = value
                    self.lru.put(keys[i], value)
        return found

    async def store(self, pairs: Sequence[tuple[str, Any]]) -> None:
        """Store successful, deterministic outputs (the caller decides which those are)."""
        for key, value in pairs:
            self.lru.put(key, value)
        if self.redis is not None:
            await self.redis.put_many(pairs)

    async def purge(self, layer: str, scope: PurgeScope) -> dict[str, int]:
        """Entries deleted per layer. The LRU belongs to this app, so it holds only this model
        version's entries and any scope clears it."""
        purged: dict[str, int] = {}
        if layer in ("lru", "all"):
            purged["lru"] = self.lru.clear()
        if layer in ("redis", "all") and self.redis is not None:
            purged["redis"] = await self.redis.purge(scope)
        return purged
