"""Sequential stopping in screening (optimize/search/sequential.py): a clear loser stops at the
first look, a close call and a winner run to their budget. Latencies and the clock are synthetic."""

from __future__ import annotations

import numpy as np
import pytest

from infertune.optimize.search.sequential import StopRule, clear_loser, time_sequential


class FakeModel:
    """A call whose latency is drawn (seeded) around ``ms``; the clock advances by it, so a
    'budget' in seconds is a number of calls and nothing sleeps."""

    def __init__(self, ms: float, noise: float = 0.05, seed: int = 1) -> None:
        self.ms, self.noise = ms, noise
        self.rng = np.random.default_rng(seed)
        self.now = 0.0
        self.calls = 0

    def clock(self) -> float:
        return self.now

    def __call__(self, request: object) -> None:
        self.calls += 1
        self.now += self.ms * float(np.exp(self.rng.normal(0, self.noise))) / 1000.0


def baseline_ms(n: int = 200, ms: float = 10.0, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(ms * np.exp(rng.normal(0, 0.05, n)))


REQUESTS = [[i] for i in range(400)]


def run(variant_ms: float, budget_s: float = 2.0) -> tuple[list[float], str | None, FakeModel]:
    model = FakeModel(variant_ms)
    samples, stopped = time_sequential(model, REQUESTS, reference_ms=baseline_ms(),
                                       budget_s=budget_s, rule=StopRule(), clock=model.clock,
                                       max_n=300)
    return samples, stopped, model


def test_a_clear_loser_stops_at_the_first_look() -> None:
    samples, stopped, model = run(20.0)  # twice the baseline's 10 ms
    assert len(samples) == 20 and model.calls == 23  # 3 warm-up calls + 20 timed
    assert stopped is not None and "cannot beat the baseline by 5%" in stopped
    assert "2.0" in stopped  # the ratio it saw, ~2.0x


def test_a_close_call_is_not_stopped_and_runs_to_its_budget() -> None:
    samples, stopped, _ = run(9.8, budget_s=1.5)  # 2% faster: cannot be ruled out quickly
    assert stopped is None
    # ~1.5 s of 9.8 ms calls: the budget, not a look, ended it
    assert 140 <= len(samples) <= 160


def test_a_winner_is_never_stopped() -> None:
    samples, stopped, _ = run(5.0, budget_s=1.0)
    assert stopped is None and len(samples) >= 190


def test_clear_loser_against_the_best_so_far_names_it() -> None:
    best = baseline_ms(ms=4.0, seed=3)
    loser = baseline_ms(ms=9.0, seed=4)
    reason = clear_loser(best, loser, StopRule(), reference="ort_int8_dynamic_per_channel")
    assert reason is not None and "ort_int8_dynamic_per_channel" in reason
    close = baseline_ms(ms=4.1, seed=5)
    assert clear_loser(best[:20], close[:20], StopRule()) is None  # at the first look
    # with 200 samples a side the CI is tight: 2.5% slower cannot beat it by 5% either
    assert clear_loser(best, close, StopRule()) is not None
    assert clear_loser(best[:10], loser[:10], StopRule()) is None  # before the first look


def test_a_worse_median_with_a_better_tail_is_kept() -> None:
    """A variant slower at p50 but with a far shorter tail (a thread plan without spinning)
    must not be stopped: only when both p50 and p95 rule it out."""
    rng = np.random.default_rng(7)
    ref = list(np.where(rng.random(160) < 0.15, 60.0, 10.0) * np.exp(rng.normal(0, .02, 160)))
    var = list(12.0 * np.exp(rng.normal(0, 0.02, 160)))
    assert clear_loser(ref, var, StopRule()) is None


@pytest.mark.parametrize("bad", [dict(min_effect=-0.1), dict(confidence=1.5),
                                 dict(looks=(2, 40))])
def test_bad_rules_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="StopRule"):
        StopRule(**bad)  # type: ignore[arg-type]
