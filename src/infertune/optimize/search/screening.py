"""Screening by what serving will cost (issue 27, item 4): each screened variant is timed at
batch 1 and at the batch sizes the sweep's policies can form under the scenario's traffic (a
few points of its service-time curve), and it is pruned only when it loses at every one of
them. A variant that is slow alone but fast on full batches (OpenVINO bf16 on AMX: 1.30x at
batch 1, 3.1x torch fp32's texts/s at batch 16 in issue 27's hand measurement) is kept for the
joint search, and the run says for each variant where it won and where it lost.

Pure functions over measured points (``judge``, ``formable_batches``) so the rules are tested
with injected curves; ``time_batches`` takes the points with an injected clock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from infertune.config import Scenario
from infertune.optimize.served.policy_sweep import SweepGrid
from infertune.serial import Serial

Outcome = Literal["won", "lost", "tie"]
# a batched point wins or loses only by more than this share of the reference's time: the
# points are medians of a handful of calls, and a near-tie is not evidence either way
MARGIN = 0.05
MAX_POINTS = 3  # batch 1, the largest formable batch and one between: "a few points"
BATCHED_PRIORS_FROM = 8  # the build order takes batch-16 priors when batches this big form


@dataclass(frozen=True)
class BatchPoint(Serial):
    """One point of a service-time curve: the median time of a call of ``batch`` inputs."""

    batch: int
    ms: float
    n: int  # calls timed

    @property
    def item_ms(self) -> float:
        return self.ms / self.batch


@dataclass
class ScreenCurve(Serial):
    """Median call times at a few batch sizes, measured here."""

    points: list[BatchPoint] = field(default_factory=list)

    def ms(self, batch: int) -> float | None:
        return next((p.ms for p in self.points if p.batch == batch), None)

    @property
    def batches(self) -> list[int]:
        return [p.batch for p in self.points]

    def with_point(self, point: BatchPoint) -> ScreenCurve:
        kept = [p for p in self.points if p.batch != point.batch]
        return ScreenCurve(sorted([*kept, point], key=lambda p: p.batch))


@dataclass(frozen=True)
class BatchVerdict(Serial):
    """How the variant did at one batch size against the best passing variant so far there
    (else the baseline): ``ratio`` is its call time over the reference's."""

    batch: int
    outcome: Outcome
    ratio: float
    reference: str
    ms: float
    reference_ms: float


@dataclass
class ServedScreen(Serial):
    """A variant's screening at the batch sizes serving forms, and what it decided."""

    batches: list[int]  # the batch sizes the traffic can form (screened)
    verdicts: list[BatchVerdict]
    kept: bool
    curve: ScreenCurve

    def outcome_at(self, batch: int) -> Outcome | None:
        return next((v.outcome for v in self.verdicts if v.batch == batch), None)

    def describe(self) -> str:
        """Where it won and where it lost, in the batch order ("lost at batch 1 (1.40x
        ort_fused's time), won at batch 16 (0.66x ...)")."""
        words = {"won": "won", "lost": "lost", "tie": "no clear difference"}
        parts = [f"{words[v.outcome]} at batch {v.batch} ({v.ratio:.2f}x {v.reference}'s time)"
                 for v in self.verdicts]
        verdict = ("kept" if self.kept else
                   "pruned: it lost at every batch size the traffic can form")
        return ", ".join(parts) + f"; {verdict}"


def formable_batches(max_batch_sizes: Sequence[int], peak_rps: float | None,
                     window_ms: float | None) -> list[int]:
    """The sweep's batch sizes the traffic can fill: a batch of b forms only when b requests
    arrive within one latency window (the SLO's loosest target) at the peak rate; the mean
    count in a window is rounded up, as bursts bring more. Without a rate or a window every
    batch size of the grid counts. At most MAX_POINTS: 1, the largest and the one nearest
    their geometric mean."""
    sizes = sorted({1, *max_batch_sizes})
    if peak_rps is not None and window_ms is not None:
        arriving = math.ceil(peak_rps * window_ms / 1000.0 - 1e-9)
        sizes = [b for b in sizes if b <= max(1, arriving)]
    if len(sizes) <= MAX_POINTS:
        return sizes
    top = sizes[-1]
    middle = min(sizes[1:-1], key=lambda b: abs(np.log(b) - np.log(top) / 2))
    return [1, middle, top]


def scenario_batches(scenario: Scenario, cores: int, quick: bool) -> list[int]:
    """``formable_batches`` for a scenario: its peak rate (else mean, else current) within
    its loosest latency target, over the sweep grid's batch sizes for ``cores``."""
    peak = scenario.traffic.peak_rps or scenario.traffic.mean_rps or scenario.current.rps
    targets = scenario.slo.targets()
    sizes = SweepGrid.for_cores(cores, quick).max_batch_size
    return formable_batches(sizes, peak, max(targets.values()) if targets else None)


def judge(variant: ScreenCurve, references: Mapping[int, tuple[str, float]],
          batches: Sequence[int], stopped_at_1: str | None = None,
          margin: float = MARGIN) -> ServedScreen:
    """The variant's verdict at each of ``batches`` against ``references`` (batch -> (name,
    ms): the best passing variant so far there, else the baseline), and whether it is kept: it
    is pruned only when it lost at every batch size. Batch 1 is lost only when batch-1 timing
    stopped it as a clear loser (``stopped_at_1``, sequential.py), as screening decided before
    the batched points; a larger batch when its median is over the reference's by ``margin``."""
    verdicts = []
    for b in batches:
        ms, ref = variant.ms(b), references.get(b)
        if ms is None or ref is None or ref[1] <= 0:
            continue
        ratio = ms / ref[1]
        # batch 1 is lost only when the sequential rule stopped it (its CI ruled out a win);
        # a batched point, a median of a few calls, by more than the margin
        lost = bool(stopped_at_1) if b == 1 else ratio > 1 + margin
        outcome: Outcome = "lost" if lost else "won" if ratio < 1 - margin else "tie"
        verdicts.append(BatchVerdict(b, outcome, round(ratio, 3), ref[0], round(ms, 3),
                                     round(ref[1], 3)))
    # a variant with no comparable point is kept unless batch-1 timing stopped it: nothing
    # else showed that it loses
    kept = (any(v.outcome != "lost" for v in verdicts) if verdicts
            else stopped_at_1 is None)
    return ServedScreen(list(batches), verdicts, kept, variant)


def time_batches(call: Callable[[Sequence[Any]], Any], inputs: Sequence[Any],
                 batches: Sequence[int], *, budget_s: float, min_n: int = 3, max_n: int = 30,
                 seed: int = 0, clock: Callable[[], float] = time.perf_counter) -> ScreenCurve:
    """Median call times of ``call`` on batches of each size drawn (seeded) from ``inputs``,
    after one warm-up call per size; ``budget_s`` is shared equally by the sizes, with at
    least ``min_n`` calls each."""
    rng = np.random.default_rng(seed)
    points = []
    per = budget_s / max(len(batches), 1)
    for b in batches:
        if not inputs:
            break
        batch = [inputs[i] for i in rng.integers(0, len(inputs), size=b)]
        call(batch)  # warm-up: allocations and any shape compilation for this size
        samples: list[float] = []
        started = clock()
        while len(samples) < max_n and (len(samples) < min_n or clock() - started < per):
            t0 = clock()
            call(batch)
            samples.append((clock() - t0) * 1000.0)
        points.append(BatchPoint(b, float(np.median(samples)), len(samples)))
    return ScreenCurve(points)


def update_best(best: dict[int, tuple[str, float]], name: str, curve: ScreenCurve) -> None:
    """Record ``name`` (a variant that passed the floor) as the reference at each batch size
    where it is the fastest so far."""
    for p in curve.points:
        if p.batch not in best or p.ms < best[p.batch][1]:
            best[p.batch] = (name, p.ms)
