"""Survivor selection, the budget, the quick timing and the input/caching helpers."""

from __future__ import annotations

import dataclasses

import pytest

from infertune.optimize.search.budget import Budget
from infertune.optimize.search.timing import (
    Candidate,
    Timing,
    batch1_requests,
    pick_best,
    quick_timing,
    select_survivors,
    time_alone,
)
from infertune.optimize.served.input_options import (
    CacheEstimate,
    cache_estimate,
    hit_rate,
    normalise_text,
    trim_length_for,
)


def timing(vid: str, p95: float) -> Timing:
    return Timing(vid, "quick", 50, p95 / 2, p95, p95 * 1.2, 10.0, 20.0, 24.0, p95 / 40,
                  (0.1, 0.2), p95 / 20, (0.1, 0.2), "B is faster", 1.0)


def cand(vid: str, verdict: str, q: float, p95: float) -> Candidate:
    return Candidate(vid, vid, verdict, q, (q - 0.001, q + 0.001), quick=timing(vid, p95))


def test_floor_failures_and_dominated_variants_are_dropped() -> None:
    cands = [cand("fast_bad", "fail", 0.96, 2.0), cand("int8", "pass", 0.995, 3.0),
             cand("fp32", "pass", 1.0, 8.0), cand("slow", "pass", 0.993, 9.0),
             cand("unsure", "inconclusive", 0.99, 2.5)]
    survivors = select_survivors(cands, keep=3)
    assert [c.variant_id for c in survivors] == ["int8", "fp32"]
    dropped = {c.variant_id: c.dropped for c in cands}
    assert dropped["fast_bad"] == "fails the quality floor"
    assert dropped["slow"].startswith("dominated by int8")
    assert "inconclusive" in dropped["unsure"]
    assert pick_best(cands).variant_id == "int8"


def test_nothing_passing_means_no_best() -> None:
    cands = [cand("a", "fail", 0.9, 2.0), cand("b", "fail", 0.95, 3.0)]
    assert select_survivors(cands) == []
    assert pick_best(cands) is None


@pytest.mark.parametrize("verdict, p95_ci, faster", [
    ("B is faster", (0.5, 0.9), True),
    ("no significant difference", (0.7, 0.95), True),   # the tail alone is clearly better
    ("B is faster", (1.05, 1.3), False),                 # a faster median, a worse tail
    ("no significant difference", (0.9, 1.1), False),
    ("B is slower", (1.1, 1.2), False),
])
def test_only_a_measurably_faster_variant_is_recommended(verdict, p95_ci, faster) -> None:
    slow = dataclasses.replace(timing("v", 3.0), verdict=verdict, ratio_p95_ci=p95_ci)
    assert slow.measurably_faster is faster
    candidate = Candidate("v", "v", "pass", 0.999, (0.998, 1.0), quick=slow)
    assert (pick_best([candidate]) is candidate) is faster


def test_budget_uses_the_injected_clock() -> None:
    now = [100.0]
    budget = Budget(60.0, clock=lambda: now[0])
    assert budget.left() == 60.0 and budget.allows(60.0)
    now[0] = 150.0
    assert budget.left() == 10.0 and not budget.allows(11.0)
    assert budget.share(0.5) == 5.0 and budget.share(0.5, cap=2.0) == 2.0
    now[0] = 200.0
    assert budget.left() == 0.0


def test_time_alone_stops_after_budget_once_minimum_is_in() -> None:
    now = [0.0]

    def call(_req: object) -> None:
        now[0] += 0.01  # every call takes 10 ms on the fake clock

    out = time_alone(call, [[i] for i in range(100)], budget_s=0.095, min_n=5, warmup=0,
                     clock=lambda: now[0])
    assert len(out) == 10
    assert out == pytest.approx([10.0] * 10)


def test_quick_timing_ratio_of_known_samples() -> None:
    base = [20.0 + i % 5 for i in range(60)]
    var = [10.0 + (i % 5) / 2 for i in range(60)]
    t = quick_timing("v", base, var)
    assert t.samples == 60
    assert t.ratio_p50 == pytest.approx(t.p50_ms / t.base_p50_ms)
    assert t.verdict == "B is faster"
    assert Timing.from_dict(t.to_dict()) == t


def test_candidate_round_trip() -> None:
    c = cand("int8", "pass", 0.995, 3.0)
    assert Candidate.from_dict(c.to_dict()).to_dict() == c.to_dict()


def test_batch1_requests_are_seeded_singletons() -> None:
    reqs = batch1_requests(["a", "b", "c"], 7, seed=1)
    assert len(reqs) == 7 and all(len(r) == 1 for r in reqs)
    assert reqs == batch1_requests(["a", "b", "c"], 7, seed=1)
    assert sorted(r[0] for r in reqs[:3]) == ["a", "b", "c"]


def test_normalised_text_and_hit_rates() -> None:
    assert normalise_text("  Reset my PASSWORD?! ") == "reset my password"
    keys = ["a", "b", "a", "c", "a", "b"]
    assert hit_rate(keys) == pytest.approx(3 / 6)
    assert hit_rate(keys, capacity=2) == pytest.approx(2 / 6)  # b is evicted by c
    est = cache_estimate(["Hello there", "hello there!", "Hello there", "bye"], "test")
    assert est.exact_hit_rate == pytest.approx(1 / 4)
    assert est.normalised_hit_rate == pytest.approx(2 / 4)
    assert CacheEstimate.from_dict(est.to_dict()) == est


def test_trim_length_keeps_99_percent() -> None:
    lengths = list(range(1, 101))  # 1..100 tokens
    length, cut = trim_length_for(lengths, keep=0.99, multiple=8)
    assert length == 104  # the 99th value is 99 -> rounded up to a multiple of 8
    assert cut == 0.0
    length, cut = trim_length_for(lengths, keep=0.5, multiple=10)
    assert length == 50 and cut == pytest.approx(0.5)


def test_pass_plan_follows_the_budget() -> None:
    from infertune.optimize.search.builder import FULL_PASSES, QUICK_PASSES, plan_passes, registry

    assert plan_passes(quick=True, budget_s=500)[0] == list(QUICK_PASSES)
    chosen, left = plan_passes(quick=False, budget_s=30)
    assert chosen == list(QUICK_PASSES) and set(left) == set(FULL_PASSES) - set(QUICK_PASSES)
    assert plan_passes(quick=False, budget_s=120) == (list(FULL_PASSES), [])
    assert set(FULL_PASSES) <= set(registry())  # every planned pass is registered


def test_tensor_models_get_their_own_plan_with_static_int8() -> None:
    from infertune.optimize.search.builder import (
        TENSOR_FULL_PASSES,
        TENSOR_QUICK_PASSES,
        plan_passes,
        registry,
    )

    quick, left = plan_passes(quick=True, budget_s=500, tensor=True)
    assert quick == list(TENSOR_QUICK_PASSES) and "ort_int8_static_minmax" in quick
    assert set(left) == set(TENSOR_FULL_PASSES) - set(TENSOR_QUICK_PASSES)
    assert plan_passes(quick=False, budget_s=120, tensor=True) == (list(TENSOR_FULL_PASSES), [])
    assert set(TENSOR_FULL_PASSES) <= set(registry())
