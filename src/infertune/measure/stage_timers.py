"""Stage timers: preprocess -> forward -> postprocess, per request, and each stage's share.

A request's end-to-end time ``e2e`` is the wall time of the whole call; ``overhead`` is what
the three stages do not account for (Python glue between them), so the four parts sum to e2e
exactly and the shares below sum to 100%.

Share definitions (documented because "share of the p99" has several readings):
  share of p50 = mean(stage) / mean(e2e) over the requests whose e2e lies in the band between
                 the 40th and 60th percentiles of e2e (the typical request);
  share of p99 = mean(stage) / mean(e2e) over the slowest ceil(1%) of requests by e2e
                 (those at or above p99; at least one request).
So "postprocess is 3% of p50 but 20% of p99" means the slow requests spend a fifth of their
time in postprocessing while typical ones spend 3%.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infertune.measure.summary import LatencySummary, quantile_sorted
from infertune.models.adapter import Adapter
from infertune.serial import Serial

STAGES: tuple[str, ...] = ("preprocess", "forward", "postprocess", "overhead")


@dataclass
class StageSamples:
    """Raw per-request durations in ms, one list per stage plus e2e (equal lengths)."""

    preprocess: list[float] = field(default_factory=list)
    forward: list[float] = field(default_factory=list)
    postprocess: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)

    def overhead(self) -> np.ndarray:
        parts = (np.asarray(self.preprocess) + np.asarray(self.forward)
                 + np.asarray(self.postprocess))
        return np.maximum(np.asarray(self.e2e) - parts, 0.0)

    def as_arrays(self) -> dict[str, np.ndarray]:
        return {"preprocess": np.asarray(self.preprocess), "forward": np.asarray(self.forward),
                "postprocess": np.asarray(self.postprocess), "overhead": self.overhead(),
                "e2e": np.asarray(self.e2e)}

    def extend(self, other: StageSamples) -> None:
        for name in ("preprocess", "forward", "postprocess", "e2e"):
            getattr(self, name).extend(getattr(other, name))

    def __len__(self) -> int:
        return len(self.e2e)


def time_requests(adapter: Adapter, requests: Sequence[Sequence[Any]], *,
                  clock: Callable[[], int] = time.perf_counter_ns,
                  on_request: Callable[[int], None] | None = None,
                  budget_s: float | None = None, min_requests: int = 1) -> StageSamples:
    """Run each request (a raw batch) through the three stages, timing each with ``clock``
    (integer nanoseconds). With ``budget_s``, stop once it is spent and ``min_requests`` ran."""
    out = StageSamples()
    start = clock()
    for i, raw in enumerate(requests):
        if (budget_s is not None and i >= min_requests
                and (clock() - start) / 1e9 >= budget_s):
            break
        t0 = clock()
        inputs = adapter.preprocess(raw)
        t1 = clock()
        outputs = adapter.forward(inputs)
        t2 = clock()
        adapter.postprocess(outputs, inputs)
        t3 = clock()
        out.preprocess.append((t1 - t0) / 1e6)
        out.forward.append((t2 - t1) / 1e6)
        out.postprocess.append((t3 - t2) / 1e6)
        out.e2e.append((clock() - t0) / 1e6)
        if on_request is not None:
            on_request(i)
    return out


@dataclass
class StageReport(Serial):
    DERIVED = ("share_definition", "dominant_p50", "dominant_p99")

    summaries: dict[str, LatencySummary]  # per stage and "e2e"
    # percent of the typical request's time, per stage
    share_p50: dict[str, float] = field(metadata={"key": "share_p50_percent"})
    # percent of the slow tail's time, per stage
    share_p99: dict[str, float] = field(metadata={"key": "share_p99_percent"})
    tail_requests: int  # how many requests the p99 share is computed over
    typical_e2e_ms: float = 0.0  # mean e2e of the p40-p60 band (the p50 share's base)
    tail_e2e_ms: float = 0.0  # mean e2e of the requests >= p99 (the p99 share's base)

    def stage_ms(self, stage: str, *, tail: bool) -> float:
        """Mean ms spent in ``stage`` by the tail requests (or the typical ones)."""
        shares, base = ((self.share_p99, self.tail_e2e_ms) if tail
                        else (self.share_p50, self.typical_e2e_ms))
        return shares[stage] * base / 100.0

    @property
    def share_definition(self) -> str:
        return ("stage mean / e2e mean over requests with e2e in [p40, p60] (p50) or the "
                "slowest ceil(1%) (p99)")

    @property
    def dominant_p50(self) -> str:
        return max(self.share_p50, key=lambda k: self.share_p50[k])

    @property
    def dominant_p99(self) -> str:
        return max(self.share_p99, key=lambda k: self.share_p99[k])

    @classmethod
    def from_samples(cls, samples: StageSamples, *, rng_seed: int = 0) -> StageReport:
        if len(samples) == 0:
            raise ValueError("no requests were timed")
        arrays = samples.as_arrays()
        e2e = arrays["e2e"]
        ordered = np.sort(e2e)
        typical = (e2e >= quantile_sorted(ordered, 0.40)) & (e2e <= quantile_sorted(ordered, 0.60))
        # the slowest ceil(1%) requests (at least one), ranked, so ties at p99 cannot pull
        # the whole run into "the tail"
        tail = np.zeros(e2e.size, dtype=bool)
        tail[np.argsort(e2e, kind="stable")[-max(1, -(-e2e.size // 100)):]] = True
        return cls(
            summaries={k: LatencySummary.from_values(v, rng_seed=rng_seed)
                       for k, v in arrays.items()},
            share_p50=stage_shares(arrays, typical), share_p99=stage_shares(arrays, tail),
            tail_requests=int(tail.sum()), typical_e2e_ms=float(e2e[typical].mean()),
            tail_e2e_ms=float(e2e[tail].mean()))


def stage_shares(arrays: dict[str, np.ndarray], selected: np.ndarray) -> dict[str, float]:
    """Percent of mean e2e spent in each stage over the ``selected`` requests."""
    total = float(arrays["e2e"][selected].mean())
    if total <= 0:
        return {stage: 0.0 for stage in STAGES}
    return {stage: 100.0 * float(arrays[stage][selected].mean()) / total for stage in STAGES}
