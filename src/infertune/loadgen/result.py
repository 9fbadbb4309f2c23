"""What a load test measured: per-request records and the LoadResult summarised from them.

Latency is completion minus the *intended* send time (never the actual send time), so a stall
in the server or in the client shows up in every request that should have been sent during it.
Client lag (actual minus intended send) is reported separately, with a warning when its p99
passes ``LAG_WARN_MS``: then the client, not the server, shaped part of the latency.

Status is a string: an HTTP status code ("200", "429"), or "connection_error", "timeout",
"error" for requests that never got an HTTP answer. 429, 503 and 504 are counted as sheds
(the server refused or gave up on the request on purpose).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from infertune.loadgen.schedules import ScheduleStats
from infertune.measure.histogram import LatencyHistogram
from infertune.measure.summary import LatencySummary
from infertune.serial import Serial

SHED_STATUSES = frozenset({"429", "503", "504"})
LAG_WARN_MS = 10.0


def is_ok(status: str) -> bool:
    return status.startswith("2") and len(status) == 3


@dataclass
class RequestRecord:
    index: int
    intended_s: float  # offsets from the start of the test, seconds
    sent_s: float
    done_s: float
    status: str
    server_timing_ms: dict[str, float] = field(default_factory=dict)
    waited_for_slot: bool = False  # held client-side by --max-in-flight

    @property
    def latency_ms(self) -> float:
        return (self.done_s - self.intended_s) * 1000.0

    @property
    def lag_ms(self) -> float:
        return (self.sent_s - self.intended_s) * 1000.0


@dataclass
class TimelinePoint(Serial):
    second: int
    count: int  # requests intended in this second that succeeded
    p50_ms: float | None
    p99_ms: float | None


@dataclass
class LoadResult(Serial):
    """A load test's summary; ``histogram`` is written by LatencyHistogram's own to_dict."""

    target: str
    schedule: ScheduleStats
    sent: int
    ok: int
    target_rate: float  # scheduled requests / scheduled duration
    achieved_rate: float  # requests sent / max(duration, time of the last send)
    goodput_rps: float  # successful completions / max(duration, time of the last completion)
    latency: LatencySummary | None  # successful requests only, from intended send time
    histogram: LatencyHistogram  # the same latencies, mergeable
    client_lag_ms: dict[str, float]  # p50, p99, max
    status_counts: dict[str, int]
    sheds: int
    errors: int  # no HTTP answer, or a status that is neither 2xx nor a shed
    waited_for_slot: int  # requests held back by the in-flight cap
    server_timing_ms: dict[str, float]  # mean per Server-Timing phase over successes
    timeline: list[TimelinePoint]
    warnings: list[str] = field(default_factory=list)
    utilisation: float | None = None  # model workers' busy share, when the target knows it


def summarise(target: str, records: list[RequestRecord], schedule: ScheduleStats,
              *, lag_warn_ms: float = LAG_WARN_MS, seed: int = 0) -> LoadResult:
    """The LoadResult of one run's records (one per scheduled request)."""
    n = len(records)
    ok_records = [r for r in records if is_ok(r.status)]
    latencies = np.array([r.latency_ms for r in ok_records], dtype=np.float64)
    lags = np.array([r.lag_ms for r in records], dtype=np.float64)
    hist = LatencyHistogram()
    for value in latencies:
        hist.record_ms(max(float(value), 0.0))
    counts: dict[str, int] = {}
    for r in records:
        counts[r.status] = counts.get(r.status, 0) + 1
    sheds = sum(c for s, c in counts.items() if s in SHED_STATUSES)
    errors = sum(c for s, c in counts.items() if not is_ok(s) and s not in SHED_STATUSES)
    duration = schedule.duration_s
    last_sent = max((r.sent_s for r in records), default=0.0)
    last_done = max((r.done_s for r in ok_records), default=0.0)
    lag = _lag_percentiles(lags)
    warnings = _warnings(lag, lag_warn_ms, counts, n)
    return LoadResult(
        target=target, schedule=schedule, sent=n, ok=len(ok_records),
        target_rate=schedule.mean_rate,
        achieved_rate=n / max(duration, last_sent) if n else 0.0,
        goodput_rps=len(ok_records) / max(duration, last_done) if ok_records else 0.0,
        latency=(LatencySummary.from_values(latencies, rng_seed=seed, n_boot=200)
                 if latencies.size else None),
        histogram=hist, client_lag_ms=lag, status_counts=counts, sheds=sheds, errors=errors,
        waited_for_slot=sum(1 for r in records if r.waited_for_slot),
        server_timing_ms=_server_timing_means(ok_records),
        timeline=timeline(ok_records), warnings=warnings,
    )


def _lag_percentiles(lags: np.ndarray) -> dict[str, float]:
    if lags.size == 0:
        return {"p50": 0.0, "p99": 0.0, "max": 0.0}
    p50, p99 = np.percentile(lags, [50, 99])
    return {"p50": float(p50), "p99": float(p99), "max": float(lags.max())}


def _warnings(lag: dict[str, float], lag_warn_ms: float, counts: dict[str, int],
              n: int) -> list[str]:
    out: list[str] = []
    if lag["p99"] > lag_warn_ms:
        out.append(f"the client could not keep up: client-lag p99 is {lag['p99']:.1f} ms "
                   f"(> {lag_warn_ms:g} ms); latencies include this lag — lower the rate or "
                   "run the client on a less loaded machine")
    conn = counts.get("connection_error", 0)
    if n and conn == n:
        out.append("every request failed to connect; check the URL and that the server is up")
    return out


def _server_timing_means(records: list[RequestRecord]) -> dict[str, float]:
    sums: dict[str, float] = {}
    seen: dict[str, int] = {}
    for r in records:
        for name, value in r.server_timing_ms.items():
            sums[name] = sums.get(name, 0.0) + value
            seen[name] = seen.get(name, 0) + 1
    return {name: sums[name] / seen[name] for name in sums}


def timeline(ok_records: list[RequestRecord]) -> list[TimelinePoint]:
    """Per-second p50/p99 of successful requests, by the second they were *intended* in."""
    if not ok_records:
        return []
    seconds = np.array([int(r.intended_s) for r in ok_records])
    latencies = np.array([r.latency_ms for r in ok_records])
    points = []
    for second in range(int(seconds.max()) + 1):
        chosen = latencies[seconds == second]
        if chosen.size:
            p50, p99 = np.percentile(chosen, [50, 99])
            points.append(TimelinePoint(second, int(chosen.size), float(p50), float(p99)))
        else:
            points.append(TimelinePoint(second, 0, None, None))
    return points


def parse_server_timing(header: str | None) -> dict[str, float]:
    """``queue;dur=1.2, inference;dur=3.4;desc="x"`` -> {"queue": 1.2, "inference": 3.4}.

    Entries without a numeric ``dur`` are skipped (Server-Timing allows names alone)."""
    if not header:
        return {}
    out: dict[str, float] = {}
    for entry in header.split(","):
        parts = [p.strip() for p in entry.split(";")]
        name = parts[0]
        if not name:
            continue
        for param in parts[1:]:
            key, _, value = param.partition("=")
            if key.strip().lower() == "dur":
                try:
                    out[name] = float(value.strip().strip('"'))
                except ValueError:
                    pass
    return out
