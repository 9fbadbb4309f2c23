"""Durable feedback: business outcomes recorded against the release that answered.

Two stores, both behind the router's FeedbackSink (serve/routing.py):

    FeedbackStore    the registry's SQLite (table ``feedback``): one server per registry; the
                     router keeps which release answered each request id in memory
    RedisFeedback    a Redis every replica shares, when the serve policy sets ``redis_url``:
                     it is also the router's AnswerLog, because the feedback for an answer may
                     reach another replica than the one that answered. Keys:
                       infertune:rollout:answer:<request id>   [release, unit], expires (ttl_s)
                       infertune:rollout:feedback:<metric>     hash <release>:n, <release>:ones
                       infertune:rollout:feedback-log          every outcome, as JSON lines

`infertune ab report --registry DIR` or `--redis URL` reads them after the servers are gone.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import redis
import redis.asyncio as aioredis

from infertune.rollout.release_registry import Registry
from infertune.rollout.stats import Counts
from infertune.serve.routing import FeedbackItem

PREFIX = "infertune:rollout"


class FeedbackStore:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def record_feedback(self, item: FeedbackItem) -> None:
        reg = self.registry
        with reg.lock, reg.db:
            reg.db.execute(
                "INSERT INTO feedback (time, request_id, release, unit, metric, value) VALUES "
                "(?, ?, ?, ?, ?, ?)",
                (item.time, item.request_id, item.release, item.unit, item.metric, item.value))

    def counts(self, metric: str) -> dict[str, Counts]:
        """Per release: outcomes received and how many were 1."""
        reg = self.registry
        with reg.lock:
            rows = reg.db.execute("SELECT release, COUNT(*), SUM(value) FROM feedback WHERE "
                                  "metric = ? GROUP BY release", (metric,)).fetchall()
        return {str(r[0]): Counts(int(r[1]), int(r[2] or 0)) for r in rows}

    def metrics(self) -> list[str]:
        reg = self.registry
        with reg.lock:
            rows = reg.db.execute("SELECT DISTINCT metric FROM feedback ORDER BY metric")
            return [str(r[0]) for r in rows.fetchall()]


class RedisFeedback:
    """AnswerLog and FeedbackSink on a Redis shared by every replica."""

    def __init__(self, url: str, *, ttl_s: float = 7 * 86400, timeout_s: float = 0.5) -> None:
        self.ttl_s = int(ttl_s)
        # the answer log runs on the event loop (async); feedback rows in a worker thread
        self.aio = aioredis.Redis.from_url(url, socket_timeout=timeout_s,
                                           socket_connect_timeout=timeout_s)
        self.sync = redis.Redis.from_url(url, socket_timeout=timeout_s,
                                         socket_connect_timeout=timeout_s)

    async def remember(self, request_id: str, release: str, unit: str | None) -> None:
        await self.aio.set(f"{PREFIX}:answer:{request_id}", json.dumps([release, unit]),
                           ex=self.ttl_s)

    async def lookup(self, request_id: str) -> tuple[str, str | None] | None:
        raw = await self.aio.get(f"{PREFIX}:answer:{request_id}")
        if raw is None:
            return None
        release, unit = json.loads(raw)
        return str(release), None if unit is None else str(unit)

    def record_feedback(self, item: FeedbackItem) -> None:
        pipe = self.sync.pipeline(transaction=True)
        key = f"{PREFIX}:feedback:{item.metric}"
        pipe.hincrby(key, f"{item.release}:n", 1)
        pipe.hincrby(key, f"{item.release}:ones", item.value)
        pipe.rpush(f"{PREFIX}:feedback-log", json.dumps(asdict(item)))
        pipe.execute()

    def counts(self, metric: str) -> dict[str, Counts]:
        fields = self.sync.hgetall(f"{PREFIX}:feedback:{metric}")
        values = {_text(k): int(v) for k, v in fields.items()}
        releases = {k.rsplit(":", 1)[0] for k in values}
        return {r: Counts(values.get(f"{r}:n", 0), values.get(f"{r}:ones", 0))
                for r in sorted(releases)}

    def metrics(self) -> list[str]:
        keys = self.sync.scan_iter(match=f"{PREFIX}:feedback:*")
        return sorted(_text(k).rsplit(":", 1)[1] for k in keys)


def _text(value: bytes | str) -> str:
    """A Redis key or field as text (the client answers bytes unless decode_responses)."""
    return value.decode() if isinstance(value, bytes) else str(value)
