"""Prometheus metrics for one app instance, on its own CollectorRegistry (never the global
one: two apps in one process, or a test, must not share counters).

The alert rules of serve/alerts.py name these metrics; tests check that each alert's
expression uses only names this module exports.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Seconds: 0.5 ms .. 10 s. Between 1 ms and 1 s neighbouring bounds are at most 1.25x apart:
# the canary's latency gates compare the share of requests above a bucket bound, so a +20%
# p95 is visible only where the buckets are finer than 20% (they were 2.5x apart at 10-25 ms,
# where a slowdown of 1.2x moved the share above 25 ms by 1.4 points; see rollout/canary_plan.py).
LATENCY_BUCKETS = (0.0005, 0.001, 0.00125, 0.0015, 0.00175, 0.002, 0.0025, 0.003, 0.0035,
                   0.004, 0.0045, 0.005, 0.006, 0.007, 0.008, 0.009, 0.01, 0.0125, 0.015,
                   0.0175, 0.02, 0.025, 0.03, 0.035, 0.04, 0.045, 0.05, 0.06, 0.07, 0.075,
                   0.08, 0.09, 0.1, 0.125, 0.15, 0.175, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5,
                   0.6, 0.7, 0.8, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

STAGES = ("queue", "preprocess", "inference", "postprocess")


class ServeMetrics:
    """The metrics one serving app exports; pass ``registry`` to read them in tests."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.stage_seconds = {
            stage: Histogram(f"infertune_{stage}_seconds", f"Time spent in the {stage} stage",
                             buckets=LATENCY_BUCKETS, registry=r)
            for stage in STAGES
        }
        self.request_seconds = Histogram(
            "infertune_request_seconds", "End-to-end time of /v1/predict, arrival to response",
            buckets=LATENCY_BUCKETS, registry=r)
        # the canary's latency gates read this one: a cache hit says nothing of a release's
        # model, and a fresh canary's cache is colder than the stable's (rollout/observe.py)
        self.model_request_seconds = Histogram(
            "infertune_model_request_seconds", "End-to-end time of /v1/predict answers that "
            "ran the model (at least one input not answered from the cache)",
            buckets=LATENCY_BUCKETS, registry=r)
        self.batch_size = Histogram(
            "infertune_batch_size", "Inputs per model call", buckets=BATCH_BUCKETS, registry=r)
        self.requests = Counter(
            "infertune_requests", "Predict requests answered, by HTTP status", ["status"],
            registry=r)
        self.cache_hits = Counter("infertune_cache_hits", "Cache hits by layer", ["layer"],
                                  registry=r)
        self.cache_misses = Counter("infertune_cache_misses", "Cache misses by layer", ["layer"],
                                    registry=r)
        self.cache_errors = Counter(
            "infertune_cache_errors", "Cache layer failures (e.g. Redis unreachable)", ["layer"],
            registry=r)
        self.shed = Counter("infertune_shed", "Requests shed before reaching the model",
                            ["reason"], registry=r)
        self.errors = Counter("infertune_errors", "Errors by type", ["type"], registry=r)
        # escalated / (fast + escalated) is the share the full model still serves: the cost
        # the cascade saves, and a drift signal when it climbs
        self.cascade_inputs = Counter(
            "infertune_cascade_inputs", "Inputs the cascade's fast model saw, by outcome "
            "(answered by the fast model, or escalated to the full one)", ["outcome"],
            registry=r)
        self.queue_depth = Gauge("infertune_queue_depth", "Requests waiting in the queue",
                                 registry=r)
        self.in_flight = Gauge("infertune_in_flight", "Predict requests being handled",
                               registry=r)
        self.ready = Gauge("infertune_ready", "1 once warm-up has finished", registry=r)
        self.drift_psi = Gauge(
            "infertune_drift_psi", "Population stability index of a row feature over the "
            "latest rows against the first rows answered (serve/live_drift.py)", ["feature"],
            registry=r)

    def observe_stages(self, timings: dict[str, float]) -> None:
        """Record one request's stage times (seconds); stages it skipped are left out."""
        for stage, seconds in timings.items():
            if stage in self.stage_seconds:
                self.stage_seconds[stage].observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def exported_names(self) -> set[str]:
        """Every series name this registry can expose (counters as ``_total``, histograms as
        ``_bucket``/``_sum``/``_count``), including labelled families not yet observed."""
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                    "gauge": ("",)}
        names: set[str] = set()
        for family in self.registry.collect():
            names.update(family.name + s for s in suffixes.get(family.type, ("",)))
        return names
