"""The confidence sequences: exact edges, the interval is the set where the mixture martingale
stays below 1/alpha, and it covers the truth at every look at once (checked by simulation)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infertune.rollout.stats import (
    Counts,
    confidence_sequence,
    difference_interval,
    log_mixture,
)


def test_no_data_covers_everything() -> None:
    assert confidence_sequence(Counts(0, 0), 0.05).to_list() == [0.0, 1.0]


def test_interval_is_where_the_martingale_stays_below_one_over_alpha() -> None:
    counts, alpha = Counts(400, 37), 0.05
    interval = confidence_sequence(counts, alpha)
    assert interval.low < 37 / 400 < interval.high
    bound = math.log(1 / alpha)
    assert log_mixture(interval.low + 1e-9, counts) < bound < log_mixture(interval.low - 1e-4,
                                                                          counts)
    assert log_mixture(interval.high - 1e-9, counts) < bound < log_mixture(interval.high + 1e-4,
                                                                           counts)


def test_all_zero_events_reach_zero_and_shrink_with_n() -> None:
    small = confidence_sequence(Counts(50, 0), 0.05)
    large = confidence_sequence(Counts(5000, 0), 0.05)
    assert small.low == 0.0 and large.low == 0.0
    assert large.high < small.high < 0.2


def test_counts_are_checked() -> None:
    with pytest.raises(ValueError, match="events <= n"):
        Counts(3, 4)
    with pytest.raises(ValueError, match="alpha"):
        confidence_sequence(Counts(3, 1), 1.5)
    assert Counts(10, 4).minus(Counts(4, 1)) == Counts(6, 3)


def test_time_uniform_coverage_by_simulation() -> None:
    """300 sequences of 600 Bernoulli(0.07) draws, every n looked at: the share of sequences
    whose interval ever excludes 0.07 must stay below alpha = 0.1 (Ville's inequality)."""
    rng = np.random.default_rng(0)
    p, alpha, bound = 0.07, 0.1, math.log(1 / 0.1)
    draws = rng.random((300, 600)) < p
    events = np.cumsum(draws, axis=1)
    missed = 0
    for row in events:
        if any(log_mixture(p, Counts(n + 1, int(s))) >= bound for n, s in enumerate(row)):
            missed += 1
    assert missed / 300 <= alpha
    # while a fixed 90% interval checked at every n would miss far more often
    z = 1.6449
    ns = np.arange(1, 601)
    rates = events / ns
    half = z * np.sqrt(np.clip(rates * (1 - rates), 1e-12, None) / ns)
    naive = np.any((np.abs(rates - p) > half)[:, 30:], axis=1).mean()
    assert naive > 2 * missed / 300


def test_difference_interval_is_wider_than_either_arm_alone() -> None:
    a, b = Counts(1000, 100), Counts(1000, 150)
    diff = difference_interval(b, a, 0.05)
    assert diff.low < 0.05 < diff.high
    single = confidence_sequence(b, 0.05)
    assert diff.high - diff.low > single.high - single.low
