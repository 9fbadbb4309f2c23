"""Paired bootstrap over examples: the variant and the baseline are scored on the SAME resampled
example indices, so the difference between them keeps the pairing (an example that is hard for
one is hard for the other) and its CI is much narrower than two independent CIs would suggest.

Percentile intervals (2.5th and 97.5th percentiles of the resampled statistic), seeded.
Per-example metrics resample their per-example values (fast, vectorised); set-level metrics
(macro-F1, pairwise Spearman, a single ranked list) recompute on each resample, so they use
fewer resamples (``set_resamples``), which the result states.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from infertune.quality.metrics import Metric, aggregate
from infertune.serial import Serial

CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 1000
DEFAULT_SET_RESAMPLES = 200


@dataclass
class Draws:
    """Bootstrap draws of one metric for the variant and the baseline (same indices)."""

    variant_value: float
    baseline_value: float
    variant: np.ndarray  # (resamples,)
    baseline: np.ndarray  # (resamples,)
    variant_per_example: np.ndarray | None  # per-example values when the metric has them
    baseline_per_example: np.ndarray | None


@dataclass
class MetricValue(Serial):
    """One metric of the variant with its 95% CI, and (against labels) the baseline's score and
    the paired variant-minus-baseline difference with its CI."""

    name: str
    vs: str  # "labels" or "baseline"
    higher_is_better: bool
    value: float
    ci_low: float
    ci_high: float
    baseline_value: float
    diff: float | None = None
    diff_ci_low: float | None = None
    diff_ci_high: float | None = None
    resamples: int = 0
    note: str | None = None


def resample_indices(n: int, resamples: int, seed: int) -> np.ndarray:
    """(resamples, n) example indices drawn with replacement; row 0 is not the identity."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, size=(resamples, n))


def draw(metric: Metric, variant: np.ndarray, baseline: np.ndarray, labels: np.ndarray | None,
         idx: np.ndarray, set_resamples: int = DEFAULT_SET_RESAMPLES) -> Draws:
    """Score the variant and the baseline on every resample in ``idx``."""
    if metric.per_example is not None:
        pv = metric.per_example(variant, baseline, labels)
        pb = metric.per_example(baseline, baseline, labels)
        return Draws(
            float(aggregate(pv, metric.aggregate)), float(aggregate(pb, metric.aggregate)),
            aggregate(pv[idx], metric.aggregate, axis=1),
            aggregate(pb[idx], metric.aggregate, axis=1), pv, pb,
        )
    assert metric.statistic is not None
    rows = idx[:set_resamples]
    stat = metric.statistic
    return Draws(
        metric.value(variant, baseline, labels), metric.value(baseline, baseline, labels),
        np.array([stat(variant, baseline, labels, r) for r in rows]),
        np.array([stat(baseline, baseline, labels, r) for r in rows]), None, None,
    )


def interval(samples: np.ndarray) -> tuple[float, float]:
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(samples, [tail, 100 - tail])
    return float(low), float(high)


def metric_value(metric: Metric, draws: Draws) -> MetricValue:
    low, high = interval(draws.variant)
    value = MetricValue(metric.name, metric.vs, metric.higher_is_better, draws.variant_value,
                        low, high, draws.baseline_value, resamples=len(draws.variant))
    if metric.vs == "labels":
        d_low, d_high = interval(draws.variant - draws.baseline)
        value.diff = draws.variant_value - draws.baseline_value
        value.diff_ci_low, value.diff_ci_high = d_low, d_high
    if metric.extreme:
        value.note = (f"{metric.name} is an extreme over examples; its bootstrap CI is unreliable "
                      "(a resample can never go past the observed extreme), shown for reference")
    return value
