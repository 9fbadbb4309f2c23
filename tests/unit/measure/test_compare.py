import numpy as np
import pytest

from infertune.measure.compare import (
    ComparisonResult,
    ComparisonStats,
    compare_samples,
    decide,
    run_interleaved,
)


def _lognormal(seed: int, median: float, n: int = 400) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(np.log(median), 0.25, n)


def test_same_distribution_is_no_significant_difference_in_at_least_19_of_20() -> None:
    verdicts = [compare_samples(_lognormal(2 * s, 10.0), _lognormal(2 * s + 1, 10.0),
                                seed=s).verdict for s in range(20)]
    assert verdicts.count("no significant difference") >= 19


def test_true_ten_percent_slowdown_is_detected() -> None:
    covered = 0
    for s in range(20):
        stats = compare_samples(_lognormal(2 * s, 10.0), _lognormal(2 * s + 1, 11.0), seed=s)
        assert stats.verdict == "B is slower"
        assert 1.02 < stats.p50.ratio < 1.25
        covered += stats.p50.low <= 1.10 <= stats.p50.high
    assert covered >= 17  # a 95% CI should hold the true ratio ~19 times in 20


def test_true_speedup_is_detected() -> None:
    stats = compare_samples(_lognormal(0, 10.0), _lognormal(1, 8.0), seed=0)
    assert stats.verdict == "B is faster"
    assert stats.p50.high < 0.98


def test_same_seed_same_answer() -> None:
    a, b = _lognormal(5, 10.0), _lognormal(6, 10.0)
    assert compare_samples(a, b, seed=3) == compare_samples(a, b, seed=3)


def test_decide_rule() -> None:
    assert decide(0.90, 0.97, 0.02) == ("B is faster", True)
    assert decide(1.03, 1.10, 0.02) == ("B is slower", True)
    assert decide(0.99, 1.01, 0.02) == ("no significant difference", True)
    assert decide(0.95, 1.05, 0.02) == ("no significant difference", False)
    assert decide(0.97, 0.99, 0.02) == ("no significant difference", False)


def test_bad_samples() -> None:
    with pytest.raises(ValueError):
        compare_samples([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        compare_samples([1.0, 0.0], [1.0, 2.0])


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_runner_interleaves_and_stops_when_conclusive() -> None:
    clock = FakeClock()
    rng = np.random.default_rng(0)

    def make(median_s: float):
        def call(raw: list) -> None:
            clock.now += median_s * rng.lognormal(0, 0.05)
        return call

    switched: list[str] = []

    def before_block(side: str) -> None:
        switched.append(side)
        clock.now += 5.0  # untimed: must not appear in any sample

    result = run_interleaved(make(0.010), make(0.012), [["x"]] * 7, budget_s=600,
                             block_size=10, min_trials=3, warmup=2, seed=1, clock=clock,
                             before_block=before_block, names=("a", "b"))
    assert "".join(switched) == "".join(result.order)
    assert result.a_summary.max < 20 and result.b_summary.max < 20
    assert result.stats.verdict == "B is slower"
    assert result.stats.method == "paired block bootstrap"
    assert result.stats.p50.confidence == 0.99  # the runner's looks use 99% CIs
    assert result.stopped == "conclusive"
    assert result.trials == 8  # MIN_BLOCK_TRIALS: the first point a drift-aware CI exists
    assert result.block_size == 10
    assert result.stats.n_a == result.stats.n_b == 80
    assert set(result.order) <= {"AB", "BA"} and len(result.order) == 8
    assert ComparisonResult.from_dict(result.to_dict()) == result


def test_runner_adds_trials_until_budget_when_inconclusive() -> None:
    clock = FakeClock()
    rng = np.random.default_rng(1)

    def call(raw: list) -> None:  # very noisy and identical: the CI stays wider than +/-2%
        clock.now += 0.010 * rng.lognormal(0, 0.8)

    result = run_interleaved(call, call, [["x"]], budget_s=2.0, block_size=10, min_trials=2,
                             warmup=0, seed=0, clock=clock, block_warmup=0)
    assert result.stopped == "budget"
    assert result.trials > 2
    assert result.stats.verdict == "no significant difference"
    assert result.stats.conclusive is False
    assert ComparisonStats.from_dict(result.stats.to_dict()) == result.stats


def test_the_calls_right_after_a_switch_are_warm_up_not_samples() -> None:
    """Each side is slow for its first two calls after the other side ran (caches evicted,
    threads parked); with the default warm-up of a quarter block those calls are untimed."""
    clock = FakeClock()
    last = {"side": ""}
    streak = {"A": 0, "B": 0}

    def make(side: str, steady_s: float):
        def call(raw: list) -> None:
            if last["side"] != side:
                streak[side] = 0
            last["side"] = side
            streak[side] += 1
            clock.now += steady_s * (3.0 if streak[side] <= 2 else 1.0)
        return call

    result = run_interleaved(make("A", 0.010), make("B", 0.020), [["x"]] * 5, budget_s=600,
                             block_size=8, min_trials=8, warmup=1, seed=2, clock=clock)
    assert result.block_warmup == 2
    assert result.a_summary.max == pytest.approx(10.0) and result.b_summary.max == \
        pytest.approx(20.0)
    assert result.stats.p95.ratio == pytest.approx(2.0)
    assert ComparisonResult.from_dict(result.to_dict()).block_warmup == 2
    cold = run_interleaved(make("A", 0.010), make("B", 0.020), [["x"]] * 5, budget_s=600,
                           block_size=8, min_trials=8, warmup=1, seed=2, clock=clock,
                           block_warmup=0)
    assert cold.a_summary.max == pytest.approx(30.0)  # without it, the switch cost is billed


def _drifting(rng: np.random.Generator, median: float, trials: int = 16,
              block: int = 20) -> np.ndarray:
    """Blocks whose level drifts +/-15% with the machine's load, in trial order."""
    level = rng.lognormal(0, 0.15, (trials, 1))
    return (rng.lognormal(np.log(median), 0.1, (trials, block)) * level).ravel()


def test_block_bootstrap_keeps_drift_from_faking_a_difference() -> None:
    iid = blocked = 0
    for s in range(20):
        rng = np.random.default_rng(100 + s)
        a, b = _drifting(rng, 10.0), _drifting(rng, 10.0)
        iid += compare_samples(a, b, seed=s).verdict == "no significant difference"
        stats = compare_samples(a, b, seed=s, block_size=20)
        assert stats.method == "paired block bootstrap"
        blocked += stats.verdict == "no significant difference"
    assert blocked >= 19
    assert iid < blocked  # why the runner resamples whole trials: iid CIs are too narrow here


def test_block_bootstrap_detects_ten_percent_slowdown() -> None:
    for s in range(10):
        rng = np.random.default_rng(200 + s)
        a = rng.lognormal(np.log(10), 0.25, 640)  # 32 trials of 20
        b = rng.lognormal(np.log(11), 0.25, 640)
        assert compare_samples(a, b, seed=s, block_size=20).verdict == "B is slower"


def test_too_few_trials_fall_back_to_independent_bootstrap() -> None:
    a, b = _lognormal(0, 10.0, 60), _lognormal(1, 10.0, 60)
    assert compare_samples(a, b, block_size=20).method == "bootstrap"


def test_slow_calls_shrink_the_block_and_too_few_trials_withhold_the_verdict() -> None:
    clock = FakeClock()

    def slow_a(raw: list) -> None:
        clock.now += 0.25

    def slower_b(raw: list) -> None:
        clock.now += 0.40

    result = run_interleaved(slow_a, slower_b, [["x"]], budget_s=1.0, block_size=20, warmup=1,
                             clock=clock)
    assert result.block_size == 3  # 1 s target / 0.325 s per call
    assert result.trials == 2
    assert result.stats.verdict == "no significant difference"
    assert result.stats.conclusive is False
    assert "verdict withheld" in result.stats.method
    assert result.stopped.startswith("budget (only 2 trials, 6 samples a side")


def test_runner_gives_no_false_alarms_under_block_drift() -> None:
    """A/A where each block's level drifts 20% (a busy machine): the runner looks after 8, 16,
    32, 64 trials and stops at the first conclusive look; it must still say "no significant
    difference" in >= 19 of 20 runs. (Independent-sample CIs call 13+ of these 20 different.)"""
    alarms = sum(_drifting_aa_run(seed) != "no significant difference" for seed in range(20))
    assert alarms <= 1


def _drifting_aa_run(seed: int) -> str:
    clock = FakeClock()
    rng = np.random.default_rng(300 + seed)
    level = [1.0]

    def call(raw: list) -> None:
        clock.now += 0.010 * level[0] * rng.lognormal(0, 0.1)

    def drift(side: str) -> None:
        level[0] = rng.lognormal(0, 0.2)

    result = run_interleaved(call, call, [["x"]], budget_s=64 * 20 * 0.0102, block_size=10,
                             warmup=0, seed=seed, clock=clock, before_block=drift)
    return result.stats.verdict
