"""Cascades of a smaller candidate model then the baseline, and right-sizing.

A cascade answers with the candidate when it is confident and escalates the rest to the
baseline. For a threshold t, a request escalates when the candidate's confidence is below t.
Over a sweep of thresholds we report the share escalated, the cascade's quality against the
baseline (agreement of the answer; accuracy too when labels exist) and its latency.

Latency is combined per request from *measured* samples: a request that escalates costs its
candidate time plus a baseline time drawn (seeded) from the baseline's measured samples. That
combination is a model of a serial cascade, so the report labels it an estimate built from
measured per-model latencies.

Embeddings do not cascade: two embedding models write vectors into different spaces, so an
index built with one cannot be queried with the other. ``confidence`` says so instead of
inventing a confidence score.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infertune.serial import Serial
from infertune.serve.cascade import confidence as serve_confidence

DEFAULT_THRESHOLDS: tuple[float, ...] = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)


class CascadeNotApplicable(Exception):
    """Raised inside this module only; callers turn it into a 'not applicable' note."""


def confidence(task: str, outputs: np.ndarray) -> np.ndarray:
    """Per-example confidence of a model's postprocessed outputs, read exactly as serve's
    cascade reads it (serve.cascade.confidence, metric "probability"), so the threshold
    chosen here means the same to the server."""
    if task not in ("classification", "reranking"):
        raise CascadeNotApplicable(
            f"a cascade needs a confidence score; {task} outputs have none"
            + (" (two embedding models write into different vector spaces, so one index "
               "cannot serve both)" if task == "embedding" else ""))
    scores = [serve_confidence(row, "probability", task) for row in outputs]
    if any(s is None for s in scores):
        raise CascadeNotApplicable(
            f"the candidate's {task} outputs are not "
            + ("probability vectors (a softmax over the classes)" if task == "classification"
               else "single scores") + ", so serve could not read a confidence from them")
    return np.asarray(scores, dtype=np.float64)


def answers(task: str, outputs: np.ndarray) -> np.ndarray:
    if task == "classification":
        return np.asarray(outputs).argmax(axis=-1)
    return (np.asarray(outputs).reshape(len(outputs)) > 0).astype(int)


@dataclass
class CascadePoint(Serial):
    threshold: float
    escalated_share: float
    agreement: float  # cascade answer == baseline answer
    accuracy: float | None  # against labels, when present
    p50_ms: float
    p95_ms: float
    p99_ms: float


@dataclass
class CascadeResult(Serial):
    candidate: str
    baseline: str
    examples: int
    latency_samples: int
    candidate_alone: CascadePoint
    points: list[CascadePoint] = field(default_factory=list)

    def best_within(self, min_agreement: float) -> CascadePoint | None:
        """The fastest (p95) threshold whose agreement stays at or above ``min_agreement``."""
        ok = [p for p in self.points if p.agreement >= min_agreement]
        return min(ok, key=lambda p: p.p95_ms) if ok else None


def evaluate_cascade(task: str, candidate_out: np.ndarray, baseline_out: np.ndarray,
                     candidate_ms: Sequence[float], baseline_ms: Sequence[float], *,
                     labels: Sequence[Any] | None = None, names: tuple[str, str] = ("c", "b"),
                     thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
                     seed: int = 0) -> CascadeResult:
    """Sweep ``thresholds`` over examples scored by both models (same order)."""
    conf = confidence(task, candidate_out)
    cand, base = answers(task, candidate_out), answers(task, baseline_out)
    lab = np.asarray(labels) if labels is not None else None
    rng = np.random.default_rng(seed)
    c_ms = np.asarray(candidate_ms, dtype=np.float64)
    b_ms = np.asarray(baseline_ms, dtype=np.float64)
    n_lat = int(min(c_ms.size, b_ms.size))
    c_draw = rng.choice(c_ms, size=n_lat, replace=False) if c_ms.size > n_lat else c_ms
    b_draw = rng.choice(b_ms, size=n_lat, replace=False) if b_ms.size > n_lat else b_ms

    def point(threshold: float, escalate: np.ndarray) -> CascadePoint:
        final = np.where(escalate, base, cand)
        share = float(escalate.mean())
        # escalate a matching share of latency samples: the first round(share*n) after a
        # seeded shuffle, so the mixture has exactly the escalation share of the data
        k = int(round(share * n_lat))
        lat = c_draw.copy()
        lat[:k] += b_draw[:k]
        acc = float((final == lab).mean()) if lab is not None else None
        return CascadePoint(threshold, share, float((final == base).mean()), acc,
                            *(float(np.percentile(lat, q)) for q in (50, 95, 99)))

    points = [point(t, conf < t) for t in thresholds]
    alone = point(0.0, np.zeros_like(conf, dtype=bool))
    return CascadeResult(names[0], names[1], int(len(conf)), n_lat, alone, points)


@dataclass
class RightSizing(Serial):
    peak_rps: float
    goodput_per_instance: float
    instances: int
    cores_per_instance: int
    cores: int
    cost_per_hour_usd: float | None  # all instances together


def right_size(peak_rps: float, goodput_per_instance: float | None, cores_per_instance: int,
               cost_per_hour_usd: float | None) -> RightSizing | None:
    """Instances (and cores) needed to carry the peak rate inside the SLO, and their cost."""
    if not goodput_per_instance or goodput_per_instance <= 0:
        return None
    instances = max(1, math.ceil(peak_rps / goodput_per_instance))
    cost = instances * cost_per_hour_usd if cost_per_hour_usd is not None else None
    return RightSizing(peak_rps, goodput_per_instance, instances, cores_per_instance,
                       instances * cores_per_instance, cost)
