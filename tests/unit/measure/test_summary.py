import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from infertune.measure.histogram import LatencyHistogram
from infertune.measure.summary import LatencySummary, percentile_ci, tail_note


def order_statistic(values: np.ndarray, percentile: float) -> float:
    return float(np.sort(values)[math.ceil(Fraction(str(percentile)) / 100 * values.size) - 1])


def test_values_match_numpy() -> None:
    x = np.random.default_rng(0).lognormal(1, 0.5, 1000)
    s = LatencySummary.from_values(x)
    assert s.count == 1000
    assert s.mean.value == pytest.approx(x.mean())
    assert s.min == x.min() and s.max == x.max()
    for p in (50, 90, 95, 99, 99.9):
        est = s.percentiles[f"p{p:g}".replace(".", "_")]
        assert est.value == order_statistic(x, p)
        assert est.low <= est.value <= est.high
        assert est.unit == "ms"
    assert s.mean.low < s.mean.value < s.mean.high


def test_tail_note_counts_samples_in_the_tail() -> None:
    assert tail_note(1000, 99) == "p99 from 1,000 samples: 10 in the top 1%"
    assert "too few" in tail_note(300, 99)
    assert LatencySummary.from_values(np.arange(1, 1001)).tail_note == \
        "p99 from 1,000 samples: 10 in the top 1%"


def test_bootstrap_ci_covers_true_percentile_near_nominal_rate() -> None:
    # 400 simulated experiments of n=200 from a lognormal with known quantiles
    rng = np.random.default_rng(42)
    true = {q: float(stats.lognorm.ppf(q, s=0.5, scale=np.exp(1))) for q in (0.5, 0.9)}
    hits = {q: 0 for q in true}
    trials = 400
    for _ in range(trials):
        x = np.sort(rng.lognormal(1, 0.5, 200))
        for q in true:
            lo, hi = percentile_ci(x, q)
            hits[q] += lo <= true[q] <= hi
    for q in true:
        coverage = hits[q] / trials
        assert 0.91 <= coverage <= 0.99, (q, coverage)


def test_round_trip_and_from_histogram() -> None:
    s = LatencySummary.from_values([1.0, 2.0, 3.0, 4.0, 100.0], rng_seed=3)
    assert LatencySummary.from_dict(s.to_dict()) == s
    h = LatencySummary.from_histogram(LatencyHistogram.from_ms([1.0, 2.0, 3.0, 1e10]))
    assert h.count == 4 and h.clamped == 1 and h.percentiles["p50"].low is None
    assert LatencySummary.from_dict(h.to_dict()) == h


def test_bad_samples_are_refused() -> None:
    with pytest.raises(ValueError):
        LatencySummary.from_values([])
    with pytest.raises(ValueError):
        LatencySummary.from_values([1.0, float("nan")])


def test_large_sample_mean_ci_uses_normal_approximation() -> None:
    x = np.random.default_rng(5).normal(10.0, 2.0, 6000)
    mean = LatencySummary.from_values(x).mean
    half = 1.959964 * x.std(ddof=1) / np.sqrt(x.size)
    assert type(mean.low) is float
    assert mean.low == pytest.approx(x.mean() - half)
    assert mean.high == pytest.approx(x.mean() + half)


def _requests(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """Token gaps of ``n`` streamed answers: each answer's level (the batch it decoded in) is
    shared by its 32 gaps, so the gaps of one answer correlate."""
    return [rng.lognormal(0, 0.3) * rng.lognormal(0.5, 0.1, 32) for _ in range(n)]


def test_grouped_cis_resample_whole_groups_and_cover_where_pooled_ones_do_not() -> None:
    rng = np.random.default_rng(3)
    population = np.concatenate(_requests(rng, 20_000))
    true_p95 = float(np.quantile(population, 0.95))
    grouped_hits = pooled_hits = 0
    trials = 300
    for _ in range(trials):
        groups = _requests(rng, 15)
        grouped = LatencySummary.from_groups(groups).percentiles["p95"]
        pooled = LatencySummary.from_values(np.concatenate(groups)).percentiles["p95"]
        assert grouped.value == pooled.value  # same figure, different interval
        grouped_hits += grouped.low <= true_p95 <= grouped.high
        pooled_hits += pooled.low <= true_p95 <= pooled.high
    # 15 answers of 32 gaps are about 15 draws, not 480: the pooled interval covers the
    # p95 far less often than its 95%, the grouped one near it
    assert grouped_hits / trials >= 0.85, grouped_hits
    assert pooled_hits / trials < 0.75, pooled_hits
    one = LatencySummary.from_groups([[1.0, 2.0, 3.0]])
    assert one.percentiles["p50"] == LatencySummary.from_values([1.0, 2.0, 3.0]).percentiles["p50"]
    with pytest.raises(ValueError, match="no latency samples"):
        LatencySummary.from_groups([[], []])
