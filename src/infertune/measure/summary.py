"""LatencySummary: count, mean, min, max and percentiles of raw latencies, in ms, each
percentile with a 95% bootstrap confidence interval and a note on how many samples sit in
its tail.

Percentile CIs use the *exact* bootstrap of an order statistic: with the "inverted CDF"
quantile, a resample's q-quantile is <= x_(j) exactly when at least ceil(q*n) of its n draws
are <= x_(j), and that count is Binomial(n, j/n). So the bootstrap distribution is known in
closed form (what infinitely many resamples would give) and costs O(n), not O(n * resamples).
The mean's CI is a seeded percentile bootstrap (normal approximation above LARGE_N samples).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from infertune.measure.histogram import LatencyHistogram
from infertune.serial import Serial

PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0, 99.9)
CONFIDENCE = 0.95
LARGE_N = 5000  # above this the mean's CI uses the normal approximation (see _mean_estimate)


@dataclass
class Estimate(Serial):
    """A value with its unit and (when known) a 95% confidence interval."""

    value: float
    low: float | None = None
    high: float | None = None
    unit: str = "ms"


def _pkey(p: float) -> str:
    return "p" + (f"{p:g}".replace(".", "_") if p != int(p) else str(int(p)))


def percentile_key(p: float) -> str:
    """50 -> "p50", 99.9 -> "p99_9" (the key used in ``LatencySummary.percentiles``)."""
    return _pkey(p)


@dataclass
class LatencySummary(Serial):
    count: int
    mean: Estimate
    min: float
    max: float
    percentiles: dict[str, Estimate] = field(default_factory=dict)
    tail_note: str = ""
    unit: str = "ms"
    clamped: int = 0  # values outside the histogram's range (histogram summaries only)

    def p(self, percentile: float) -> float:
        return self.percentiles[_pkey(percentile)].value

    @property
    def p50(self) -> float:
        return self.p(50)

    @property
    def p95(self) -> float:
        return self.p(95)

    @property
    def p99(self) -> float:
        return self.p(99)

    @classmethod
    def from_values(cls, samples_ms: Sequence[float] | np.ndarray, *, rng_seed: int = 0,
                    n_boot: int = 1000,
                    percentiles: Sequence[float] = PERCENTILES) -> LatencySummary:
        values = np.sort(np.asarray(samples_ms, dtype=np.float64))
        if values.size == 0:
            raise ValueError("no latency samples to summarise")
        if not np.all(np.isfinite(values)):
            raise ValueError("latency samples contain NaN or infinity")
        pcts = {_pkey(p): Estimate(float(quantile_sorted(values, p / 100)),
                                   *percentile_ci(values, p / 100))
                for p in percentiles}
        return cls(count=int(values.size), mean=_mean_estimate(values, rng_seed, n_boot),
                   min=float(values[0]), max=float(values[-1]), percentiles=pcts,
                   tail_note=tail_note(int(values.size), 99.0))

    @classmethod
    def from_groups(cls, groups: Sequence[Sequence[float]], *,
                    percentiles: Sequence[float] = PERCENTILES) -> LatencySummary:
        """The summary of values that come in correlated groups (the token gaps of one
        streamed answer, decoded in the same batches): figures of the pooled values, CIs that
        count groups, not values (``grouped_quantile_ci``). Treating 32 gaps of one answer as
        32 independent draws gave intervals too narrow to cover a second measurement of the
        same server (ITL p95 1.59 ms [1.52, 1.77] against 2.11 [1.85, 2.37]). One group: the
        single-value intervals, as nothing else is known."""
        arrays = [np.asarray(g, dtype=np.float64) for g in groups if len(g)]
        if not arrays:
            raise ValueError("no latency samples to summarise")
        pooled = cls.from_values(np.concatenate(arrays), percentiles=percentiles)
        if len(arrays) < 2:
            return pooled
        for p in percentiles:
            estimate = pooled.percentiles[_pkey(p)]
            estimate.low, estimate.high = grouped_quantile_ci(arrays, p / 100)
        pooled.mean = _grouped_mean(arrays)
        return pooled

    @classmethod
    def from_histogram(cls, hist: LatencyHistogram,
                       percentiles: Sequence[float] = PERCENTILES) -> LatencySummary:
        """Summary from a histogram: values to HDR precision, no CIs (raw samples are gone)."""
        if hist.count == 0:
            raise ValueError("the histogram is empty")
        pcts = {_pkey(p): Estimate(hist.percentile_ms(p)) for p in percentiles}
        return cls(count=hist.count, mean=Estimate(hist.mean_ms()), min=hist.min_ms(),
                   max=hist.max_ms(), percentiles=pcts, tail_note=tail_note(hist.count, 99.0),
                   clamped=hist.clamped)


def quantile_sorted(sorted_values: np.ndarray, q: float) -> float:
    """The inverted-CDF quantile (an observed value): x_(ceil(q*n)), 1-based."""
    n = sorted_values.size
    k = min(max(math.ceil(q * n - 1e-9), 1), n)
    return float(sorted_values[k - 1])


def bootstrap_quantile_cdf(n: int, q: float) -> np.ndarray:
    """P(bootstrap q-quantile <= x_(j)) for j = 1..n (see the module docstring)."""
    k = min(max(math.ceil(q * n - 1e-9), 1), n)
    j = np.arange(1, n + 1)
    # P(Binomial(n, j/n) >= k) = sf(k - 1)
    return np.asarray(stats.binom.sf(k - 1, n, j / n), dtype=np.float64)


def percentile_ci(sorted_values: np.ndarray, q: float,
                  confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Exact percentile-bootstrap CI of the q-quantile of ``sorted_values``."""
    n = sorted_values.size
    cdf = bootstrap_quantile_cdf(n, q)
    alpha = (1 - confidence) / 2
    lo = int(np.searchsorted(cdf, alpha, side="left"))
    hi = int(np.searchsorted(cdf, 1 - alpha, side="left"))
    return float(sorted_values[min(lo, n - 1)]), float(sorted_values[min(hi, n - 1)])


def grouped_quantile_ci(groups: Sequence[np.ndarray], q: float,
                        confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Woodruff's interval for the q-quantile of pooled values drawn as whole groups: the share
    of values at or below the pooled quantile is a ratio over groups, whose variance is the
    groups' (cluster sampling); q +- t(n-1) standard errors read back through the pooled
    quantile function. In simulation (15 groups of 32 lognormal gaps, each group's level
    lognormal with sigma 0.1-0.3) it covers the p95 in 88-94% of runs; resampling values
    instead covered it in 26-39%."""
    pooled = np.sort(np.concatenate(groups))
    n, total = len(groups), pooled.size
    x = quantile_sorted(pooled, q)
    sizes = np.array([g.size for g in groups], dtype=np.float64)
    below = np.array([np.count_nonzero(g <= x) for g in groups], dtype=np.float64)
    share = below.sum() / total
    se = math.sqrt(n / (n - 1) * float(((below - share * sizes) ** 2).sum())) / total
    t = float(stats.t.ppf(0.5 + confidence / 2, n - 1))
    low_q, high_q = max(q - t * se, 0.0), min(q + t * se, 1.0)
    return quantile_sorted(pooled, max(low_q, 1e-12)), quantile_sorted(pooled, high_q)


def _grouped_mean(groups: Sequence[np.ndarray]) -> Estimate:
    """The pooled mean with a cluster-robust (ratio-estimator) t interval over the groups."""
    n = len(groups)
    sizes = np.array([g.size for g in groups], dtype=np.float64)
    sums = np.array([g.sum() for g in groups], dtype=np.float64)
    mean = float(sums.sum() / sizes.sum())
    se = math.sqrt(n / (n - 1) * float(((sums - mean * sizes) ** 2).sum())) / float(sizes.sum())
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * se
    return Estimate(mean, mean - half, mean + half)


def sample_bootstrap_quantiles(sorted_values: np.ndarray, q: float, n_draws: int,
                               rng: np.random.Generator) -> np.ndarray:
    """Draws from the exact bootstrap distribution of the q-quantile (inverse-CDF sampling)."""
    cdf = bootstrap_quantile_cdf(sorted_values.size, q)
    idx = np.searchsorted(cdf, rng.random(n_draws), side="left")
    return sorted_values[np.minimum(idx, sorted_values.size - 1)]


def _mean_estimate(values: np.ndarray, seed: int, n_boot: int) -> Estimate:
    mean = float(values.mean())
    if values.size < 2:
        return Estimate(mean)
    if values.size > LARGE_N:
        # the bootstrap distribution of a mean of this many samples is normal to well within
        # the CI's own noise, and resampling would cost O(n * n_boot)
        half = 1.959964 * float(values.std(ddof=1)) / float(np.sqrt(values.size))
        return Estimate(mean, mean - half, mean + half)
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    chunk = max(1, 2_000_000 // values.size)  # bound memory: at most ~2M draws at a time
    for start in range(0, n_boot, chunk):
        stop = min(start + chunk, n_boot)
        draws = rng.integers(0, values.size, size=(stop - start, values.size))
        means[start:stop] = values[draws].mean(axis=1)
    low, high = np.quantile(means, [(1 - CONFIDENCE) / 2, 1 - (1 - CONFIDENCE) / 2])
    return Estimate(mean, float(low), float(high))


def tail_note(count: int, percentile: float) -> str:
    """'p99 from 1,000 samples: 10 in the top 1%' — how much data a tail figure stands on."""
    share = 100.0 - percentile
    in_tail = int(math.floor(count * share / 100.0 + 1e-9))
    warning = "" if in_tail >= 10 else " (too few for a stable tail; collect more)"
    return (f"{_pkey(percentile)} from {count:,} samples: {in_tail:,} in the top "
            f"{share:g}%{warning}")
