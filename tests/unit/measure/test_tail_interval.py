"""A percentile's interval against a target: meets only wholly below, misses only wholly above,
"not shown" when it straddles, when the tail is too thin to bound, or when the run held too
few of the traffic's burst blocks (the demo's 8-second window "met" a p95 a 40-second run
showed missed)."""

from __future__ import annotations

import numpy as np
import pytest

from infertune.measure.tail_interval import (
    MIN_BLOCKS,
    TailInterval,
    order_statistic_bounds,
    tail_interval,
    verdict,
)


def interval(low: float | None, high: float | None, *, blocks: int = 30) -> TailInterval:
    return TailInterval(0.99, 20.0, low, high, 3000, blocks, 1.0)


def test_a_verdict_with_an_interval_straddling_the_target_is_not_shown() -> None:
    found, why = verdict(interval(18.0, 24.0), 22.0)
    assert found == "not shown"
    assert why == ("p99 20.0 ms (95% CI 18.0-24.0, n=3000, 30 x 1 s blocks) straddles the "
                   "22 ms target")


def test_meets_only_wholly_below_and_misses_only_wholly_above() -> None:
    assert verdict(interval(18.0, 21.9), 22.0)[0] == "meets"
    assert verdict(interval(18.0, 22.0), 22.0)[0] == "meets"  # at the target still keeps it
    assert verdict(interval(22.1, 30.0), 22.0)[0] == "misses"
    assert verdict(interval(None, 30.0), 22.0)[0] == "not shown"
    # no upper bound: too few answers in the tail to bound it, whatever the point says
    found, why = verdict(interval(5.0, None), 22.0)
    assert found == "not shown" and "has no upper bound" in why


def test_too_few_burst_blocks_decide_nothing_either_way() -> None:
    few = MIN_BLOCKS - 1
    assert verdict(interval(1.0, 2.0, blocks=few), 22.0)[0] == "not shown"
    assert verdict(interval(50.0, 60.0, blocks=few), 22.0)[0] == "not shown"
    assert verdict(interval(1.0, 2.0, blocks=MIN_BLOCKS), 22.0)[0] == "meets"


def test_order_statistic_ranks_need_enough_samples_for_the_tail() -> None:
    # P(all n below the true p99) = 0.99^n must be <= 2.5% for an upper bound: n >= 368
    assert order_statistic_bounds(367, 0.99)[1] is None
    assert order_statistic_bounds(368, 0.99)[1] == 368
    low, high = order_statistic_bounds(1000, 0.5)
    assert (low, high) == (469, 532)  # the textbook 95% ranks for a median of 1,000


def test_a_run_of_126_answers_cannot_bound_its_p99_and_so_never_meets() -> None:
    rng = np.random.default_rng(3)
    lat = rng.gamma(4.0, 2.0, size=126)
    starts = np.linspace(0.0, 8.0, 126, endpoint=False)
    got = tail_interval(lat, starts, 0.99, block_s=1.0)
    assert got.samples == 126 and got.high is None and got.blocks == 8
    assert verdict(got, 1e6)[0] == "not shown"


def test_bursty_latencies_widen_the_interval_beyond_the_iid_one() -> None:
    # 30 one-second blocks; every third block is a burst whose answers are all slow together
    rng = np.random.default_rng(7)
    lat, starts = [], []
    for b in range(30):
        slow = b % 3 == 0
        values = rng.normal(30.0 if slow else 10.0, 1.0, size=100)
        lat += list(values)
        starts += list(b + np.linspace(0, 0.99, 100))
    got = tail_interval(lat, starts, 0.5, block_s=1.0, seed=1)
    ordered = np.sort(lat)
    lo, hi = order_statistic_bounds(len(lat), 0.5)
    assert lo is not None and hi is not None
    iid_width = ordered[hi - 1] - ordered[lo - 1]
    assert got.blocks == 30
    assert got.low is not None and got.high is not None
    assert got.high - got.low > 5 * iid_width  # whole bursts resampled, not single answers
    # the same latencies with one block each are the i.i.d. interval alone (hull of one)
    alone = tail_interval(lat, [0.0] * len(lat), 0.5, block_s=1.0)
    assert (alone.low, alone.high) == (ordered[lo - 1], ordered[hi - 1]) and alone.blocks == 1


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="one start per latency"):
        tail_interval([], [], 0.99, block_s=1.0)
    with pytest.raises(ValueError, match="block_s > 0"):
        tail_interval([1.0], [0.0], 0.99, block_s=0.0)
    with pytest.raises(ValueError, match="one start per latency"):
        tail_interval([1.0, 2.0], [0.0], 0.99, block_s=1.0)


def test_the_interval_round_trips() -> None:
    got = interval(1.0, None)
    assert TailInterval.from_dict(got.to_dict()) == got
    assert got.in_tail == 30


def test_a_higher_confidence_widens_the_interval_and_says_so() -> None:
    # the confirmation looks twice (after ABBA, after an extension): each look at 97.5% keeps
    # the chance of a wrong decision over both at most 5%
    rng = np.random.default_rng(11)
    lat = rng.gamma(4.0, 2.0, size=4000)
    starts = np.linspace(0.0, 40.0, 4000, endpoint=False)
    at95 = tail_interval(lat, starts, 0.95, block_s=1.0, seed=2)
    at975 = tail_interval(lat, starts, 0.95, block_s=1.0, seed=2, confidence=0.975)
    assert at95.confidence == 0.95 and at975.confidence == 0.975
    assert at95.low is not None and at95.high is not None
    assert at975.low is not None and at975.high is not None
    assert at975.low < at95.low and at975.high > at95.high
    assert "(97.5% CI" in verdict(at975, 1e6)[1]
    assert TailInterval.from_dict(at975.to_dict()) == at975
    # a file written before the confidence was recorded reads as 95%
    old = {k: v for k, v in at95.to_dict().items() if k != "confidence"}
    assert TailInterval.from_dict(old).confidence == 0.95
    with pytest.raises(ValueError, match="confidence in"):
        tail_interval([1.0], [0.0], 0.99, block_s=1.0, confidence=1.0)
