"""Durable feedback: business outcomes recorded against the release that answered.

The router (serve/routing.py) calls ``record_feedback`` for each POST /v1/feedback; this store
keeps them in the registry's SQLite file (table ``feedback``), so `infertune ab report
--registry DIR` can read them after the server is gone. One server per registry: several
replicas would each need the same store, which SQLite on a shared disk does not give
(a Redis store is the planned answer for that case; not built yet).
"""

from __future__ import annotations

from infertune.rollout.registry import Registry
from infertune.rollout.stats import Counts
from infertune.serve.routing import FeedbackItem


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
