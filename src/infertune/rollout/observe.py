"""Reading live counts per release: from the router's /metrics, or PromQL against Prometheus.

Both sources give a ``Snapshot`` of cumulative counters per release; the controller subtracts
the snapshot taken when the rollout began, so only traffic since then is judged (and at a
100% step stops the latency and business counts at that step's start: ``evidence``). Series read
(the router adds ``release`` to every sample of a release's own metrics):

    infertune_requests_total{release, status}         answers; 5xx and 429 count as errors
    infertune_routed_requests_total{release}          requests routed, counted on arrival
    infertune_model_request_seconds_bucket{release, le}  latency of answers that ran the
                                                      model (the latency gates' histogram:
                                                      a cache hit says nothing of the model,
                                                      and a fresh canary's cache is colder;
                                                      the router's replays of canary answers
                                                      to the stable are left out of it);
    infertune_request_seconds_bucket{release, le}     all answers, read where the first is
                                                      absent (a server before it existed)
    infertune_shadow_rows_total{release, outcome}     rows compared with the stable's
    infertune_feedback_total / _ones_total{release, metric}   binary business outcomes
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

import httpx
from prometheus_client.parser import text_string_to_metric_families

from infertune.errors import ConfigError
from infertune.rollout.gates import ArmPair, Evidence
from infertune.rollout.stats import Counts

Sample = tuple[str, dict[str, str], float]  # (series name, labels, value)
PROMQL = {
    "infertune_requests_total": "sum by (release, status) (infertune_requests_total)",
    "infertune_request_seconds_bucket":
        "sum by (release, le) (infertune_request_seconds_bucket)",
    "infertune_model_request_seconds_bucket":
        "sum by (release, le) (infertune_model_request_seconds_bucket)",
    "infertune_shadow_rows_total": "sum by (release, outcome) (infertune_shadow_rows_total)",
    "infertune_feedback_total": "sum by (release, metric) (infertune_feedback_total)",
    "infertune_feedback_ones_total": "sum by (release, metric) (infertune_feedback_ones_total)",
    "infertune_routed_requests_total": "sum by (release) (infertune_routed_requests_total)",
}


@dataclass
class ReleaseCounts:
    requests: int = 0
    errors: int = 0
    buckets: dict[float, float] = field(default_factory=dict)  # le -> cumulative count
    rows: int = 0
    disagreeing: int = 0  # disagreeing rows plus replays that failed
    feedback: dict[str, Counts] = field(default_factory=dict)
    # counted on arrival by the router: the offered rate even while answers lag behind it
    # (None: a source without the router's counter, e.g. one release's own /metrics)
    routed: int | None = None

    def over(self, threshold: float) -> Counts:
        """Requests slower than ``threshold`` (a bucket bound) out of all observed."""
        total = self.buckets.get(math.inf, 0.0)
        within = self.buckets.get(threshold, 0.0)
        return Counts(int(total), int(total - within))


@dataclass
class Snapshot:
    releases: dict[str, ReleaseCounts] = field(default_factory=dict)

    def of(self, release: str) -> ReleaseCounts:
        return self.releases.get(release, ReleaseCounts())


def snapshot_from(samples: Iterable[Sample]) -> Snapshot:
    snap = Snapshot()
    model: dict[str, dict[float, float]] = {}  # release -> the model-answer histogram
    ones: dict[tuple[str, str], float] = {}
    totals: dict[tuple[str, str], float] = {}
    for name, labels, value in samples:
        release = labels.get("release")
        if release is None:
            continue
        rc = snap.releases.setdefault(release, ReleaseCounts())
        if name == "infertune_requests_total":
            rc.requests += int(value)
            status = labels.get("status", "")
            if status.startswith("5") or status == "429":
                rc.errors += int(value)
        elif name == "infertune_request_seconds_bucket":
            le = float(labels["le"])  # "+Inf" parses to inf
            rc.buckets[le] = rc.buckets.get(le, 0.0) + value
        elif name == "infertune_model_request_seconds_bucket":
            le, hist = float(labels["le"]), model.setdefault(release, {})
            hist[le] = hist.get(le, 0.0) + value
        elif name == "infertune_shadow_rows_total":
            rc.rows += int(value)
            if labels.get("outcome") != "agree":
                rc.disagreeing += int(value)
        elif name == "infertune_routed_requests_total":
            rc.routed = (rc.routed or 0) + int(value)
        elif name == "infertune_feedback_total":  # summed: one series per Ray replica
            key = (release, labels["metric"])
            totals[key] = totals.get(key, 0.0) + value
        elif name == "infertune_feedback_ones_total":
            key = (release, labels["metric"])
            ones[key] = ones.get(key, 0.0) + value
    for release, hist in model.items():
        snap.releases[release].buckets = hist
    for (release, metric), n in totals.items():
        snap.releases[release].feedback[metric] = Counts(int(n), int(ones.get((release, metric),
                                                                                0)))
    return snap


def parse_exposition(text: str) -> Snapshot:
    samples = ((s.name, dict(s.labels), float(s.value))
               for family in text_string_to_metric_families(text) for s in family.samples)
    return snapshot_from(samples)


class MetricsSource(Protocol):
    def snapshot(self) -> Snapshot: ...


class ServerMetrics:
    """The router's own /metrics (the default source)."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def snapshot(self) -> Snapshot:
        response = self.client.get("/metrics")
        if response.status_code != 200:
            raise ConfigError(f"GET /metrics answered {response.status_code}; pass the API key "
                              "with --api-key-env or check --server")
        return parse_exposition(response.text)


class PrometheusMetrics:
    """Instant PromQL queries, summed over every replica that Prometheus scrapes."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def snapshot(self) -> Snapshot:
        samples: list[Sample] = []
        for name, query in PROMQL.items():
            try:
                response = self.client.get("/api/v1/query", params={"query": query})
                data = response.json()
            except (httpx.HTTPError, ValueError) as exc:
                raise ConfigError(f"Prometheus query failed ({type(exc).__name__}); check "
                                  "--prometheus URL") from exc
            if response.status_code != 200 or data.get("status") != "success":
                raise ConfigError(f"Prometheus answered {response.status_code} to {query!r}: "
                                  f"{data.get('error', 'no error text')}")
            for row in data["data"]["result"]:
                samples.append((name, dict(row["metric"]), float(row["value"][1])))
        return snapshot_from(samples)


def threshold(counts: ReleaseCounts, quantile: float, min_samples: int) -> float | None:
    """The smallest finite bucket bound holding ``quantile`` of the release's requests, or
    None with fewer than ``min_samples`` of them (or when that bound would be +Inf)."""
    total = counts.buckets.get(math.inf, 0.0)
    if total < min_samples:
        return None
    for le in sorted(counts.buckets):
        if counts.buckets[le] >= quantile * total:
            return le if math.isfinite(le) else None
    return None


def threshold_near(counts: ReleaseCounts, quantile: float, min_samples: int) -> float | None:
    """The bucket bound whose share of slower requests is nearest ``1 - quantile`` (on a log
    scale; a tie goes to the lower bound, which has more of them), or None with fewer than
    ``min_samples`` requests or when no finite bound has requests on both sides.

    Not simply the bound at or below the quantile: where the latencies crowd between two
    bounds (a 2.2 ms model between 2 and 2.5 ms) that bound has 89% of the requests above it,
    and the share above it then measures the body of the distribution, where a canary 5%
    slower in its median moves it by 10 points while its tail is unchanged."""
    total = counts.buckets.get(math.inf, 0.0)
    if total < min_samples:
        return None
    target = 1.0 - quantile
    best: tuple[float, float] | None = None  # (distance, bound)
    for le in sorted(b for b in counts.buckets if math.isfinite(b)):
        share = 1.0 - counts.buckets[le] / total
        if not 0 < share < 1:
            continue
        distance = abs(math.log(share / target))
        if best is None or distance < best[0] - 1e-9:  # ascending: a tie keeps the lower
            best = (distance, le)
    return best[1] if best is not None else None


def _since(now: ReleaseCounts, start: ReleaseCounts) -> ReleaseCounts:
    feedback = {m: c.minus(start.feedback.get(m, Counts(0, 0))) for m, c in now.feedback.items()}
    return ReleaseCounts(
        requests=now.requests - start.requests, errors=now.errors - start.errors,
        buckets={le: v - start.buckets.get(le, 0.0) for le, v in now.buckets.items()},
        rows=now.rows - start.rows, disagreeing=now.disagreeing - start.disagreeing,
        feedback=feedback)


def evidence(start: Snapshot, now: Snapshot, canary: str, stable: str, *,
             p95_s: float | None, p99_s: float | None,
             business_metric: str | None = None,
             own_until: Snapshot | None = None) -> Evidence:
    """The gates' evidence: counts of each arm since ``start``. With ``own_until``, the gates
    whose stable side is the stable's own answers (latency, business) count only up to that
    snapshot, the errors and agreement gates (which the replays keep concurrent) up to ``now``:
    once the stable answers no traffic of its own, its own-answer counts stop while the
    canary's go on, and comparing them would compare different times."""
    c = _since(now.of(canary), start.of(canary))
    s = _since(now.of(stable), start.of(stable))
    if own_until is None:
        oc, os_ = c, s
    else:
        oc = _since(own_until.of(canary), start.of(canary))
        os_ = _since(own_until.of(stable), start.of(stable))
    errors = ArmPair(Counts(c.requests, min(c.errors, c.requests)),
                     Counts(s.requests, min(s.errors, s.requests)))
    metric = business_metric or next((m for m in sorted(oc.feedback) if m in os_.feedback),
                                     None)
    business = (ArmPair(oc.feedback[metric], os_.feedback[metric])
                if metric and metric in oc.feedback and metric in os_.feedback else None)
    return Evidence(
        errors=errors,
        latency_p95=ArmPair(oc.over(p95_s), os_.over(p95_s)) if p95_s is not None else None,
        latency_p99=ArmPair(oc.over(p99_s), os_.over(p99_s)) if p99_s is not None else None,
        agreement=Counts(c.rows, min(c.disagreeing, c.rows)) if c.rows else None,
        business=business, business_metric=metric, p95_threshold_s=p95_s, p99_threshold_s=p99_s)
