"""Gates: verdicts with the estimate, interval and sample sizes; the alpha split; config
errors; evidence built from /metrics text."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from infertune.rollout.gates import ArmPair, Evidence, GateConfig, judge, overall
from infertune.rollout.observe import (
    ReleaseCounts,
    evidence,
    parse_exposition,
    threshold,
    threshold_near,
)
from infertune.rollout.stats import Counts

CONFIG = GateConfig(alpha=0.05, min_samples=100)


def _by_gate(ev: Evidence) -> dict[str, object]:
    return {r.gate: r for r in judge(ev, CONFIG)}


def test_equal_arms_pass_and_a_sure_regression_fails() -> None:
    same = ArmPair(Counts(2000, 20), Counts(4000, 40))
    ev = Evidence(errors=same, latency_p95=same, latency_p99=same, agreement=Counts(2000, 0))
    results = judge(ev, CONFIG)
    assert [r.verdict for r in results][:4] == ["pass"] * 4
    assert overall(results, ("errors", "latency_p95", "latency_p99", "agreement")) == "pass"
    bad = Evidence(errors=ArmPair(Counts(2000, 200), Counts(4000, 40)), latency_p95=same,
                   latency_p99=same, agreement=Counts(2000, 0))
    results = judge(bad, CONFIG)
    errors = results[0]
    assert errors.gate == "errors" and errors.verdict == "fail"
    assert errors.estimate == pytest.approx(0.1 - 0.01)
    assert errors.interval.low > CONFIG.error_tolerance
    assert (errors.n_canary, errors.n_stable) == (2000, 4000)
    assert errors.alpha == pytest.approx(0.05 / 5)
    text = errors.sentence()
    assert "errors" in text and "+0.0900" in text and "n=2000 canary, 4000 stable" in text
    assert overall(results, ("errors",)) == "fail"


def test_too_few_samples_wait_and_missing_gates_wait() -> None:
    ev = Evidence(errors=ArmPair(Counts(20, 0), Counts(20, 0)))
    results = {r.gate: r for r in judge(ev, CONFIG)}
    assert results["errors"].verdict == "wait"
    assert results["agreement"].verdict == "wait" and results["business"].verdict == "wait"
    assert overall(list(results.values()), ("errors",)) == "wait"


def test_agreement_fails_above_the_allowed_share_and_business_fails_lower() -> None:
    ev = Evidence(errors=ArmPair(Counts(500, 0), Counts(500, 0)), agreement=Counts(500, 150),
                  business=ArmPair(Counts(3000, 150), Counts(3000, 450)),
                  business_metric="conversion")
    results = {r.gate: r for r in judge(ev, CONFIG)}
    assert results["agreement"].verdict == "fail"
    assert results["agreement"].estimate == pytest.approx(0.3)
    assert results["business"].verdict == "fail"
    assert results["business"].estimate == pytest.approx(0.05 - 0.15)
    assert "conversion" in results["business"].what


def test_config_is_validated() -> None:
    with pytest.raises(ValidationError):
        GateConfig(alpha=0)
    with pytest.raises(ValidationError, match="each once"):
        GateConfig(gates=("errors", "errors"))
    assert GateConfig(gates=("errors", "agreement")).alpha_per_gate == pytest.approx(0.025)


EXPOSITION = """# HELP infertune_requests_total x
# TYPE infertune_requests_total counter
infertune_requests_total{release="a",status="200"} 90.0
infertune_requests_total{release="a",status="503"} 10.0
infertune_requests_total{release="b",status="200"} 40.0
# HELP infertune_request_seconds x
# TYPE infertune_request_seconds histogram
infertune_request_seconds_bucket{release="a",le="0.01"} 80.0
infertune_request_seconds_bucket{release="a",le="0.025"} 97.0
infertune_request_seconds_bucket{release="a",le="+Inf"} 100.0
infertune_request_seconds_count{release="a"} 100.0
infertune_request_seconds_sum{release="a"} 1.0
infertune_request_seconds_bucket{release="b",le="0.01"} 10.0
infertune_request_seconds_bucket{release="b",le="0.025"} 30.0
infertune_request_seconds_bucket{release="b",le="+Inf"} 40.0
infertune_request_seconds_count{release="b"} 40.0
infertune_request_seconds_sum{release="b"} 1.0
# HELP infertune_shadow_rows_total x
# TYPE infertune_shadow_rows_total counter
infertune_shadow_rows_total{release="b",outcome="agree"} 36.0
infertune_shadow_rows_total{release="b",outcome="disagree"} 4.0
# HELP infertune_feedback_total x
# TYPE infertune_feedback_total counter
infertune_feedback_total{release="a",metric="conversion"} 50.0
infertune_feedback_total{release="b",metric="conversion"} 20.0
# HELP infertune_feedback_ones_total x
# TYPE infertune_feedback_ones_total counter
infertune_feedback_ones_total{release="a",metric="conversion"} 5.0
infertune_feedback_ones_total{release="b",metric="conversion"} 4.0
"""


def test_evidence_from_metrics_text() -> None:
    snap = parse_exposition(EXPOSITION)
    a, b = snap.of("a"), snap.of("b")
    assert (a.requests, a.errors, b.requests) == (100, 10, 40)
    assert threshold(a, 0.95, min_samples=50) == 0.025
    assert threshold(a, 0.5, min_samples=500) is None  # too few samples
    ev = evidence(parse_exposition(""), snap, "b", "a", p95_s=0.01, p99_s=0.025)
    assert ev.errors == ArmPair(Counts(40, 0), Counts(100, 10))
    assert ev.latency_p95 == ArmPair(Counts(40, 30), Counts(100, 20))
    assert ev.latency_p99 == ArmPair(Counts(40, 10), Counts(100, 3))
    assert ev.agreement == Counts(40, 4)
    assert ev.business == ArmPair(Counts(20, 4), Counts(50, 5))
    assert ev.business_metric == "conversion"
    since = evidence(snap, snap, "b", "a", p95_s=0.01, p99_s=None)
    assert since.errors == ArmPair(Counts(0, 0), Counts(0, 0)) and since.latency_p99 is None


def test_the_p95_threshold_is_the_bound_with_a_tail_share_nearest_ten_percent() -> None:
    def counts(cumulative: dict[float, float]) -> ReleaseCounts:
        return ReleaseCounts(buckets={**cumulative, math.inf: 1000.0})

    # latencies crowded between 2 and 2.5 ms (the served MLP measured at 20 req/s): 89% are
    # above 2 ms and 4% above 2.5 ms; the bound at or below the p90 (2 ms) would judge the
    # median, so the gate counts above 2.5 ms
    crowded = counts({0.00175: 0.0, 0.002: 110.0, 0.0025: 960.0, 0.003: 995.0})
    assert threshold_near(crowded, 0.90, min_samples=100) == 0.0025
    # spread latencies: the bound at the p90 itself
    spread = counts({0.005: 500.0, 0.01: 900.0, 0.02: 990.0})
    assert threshold_near(spread, 0.90, min_samples=100) == 0.01
    # a tie (20% and 5%, both twice from 10%) goes to the lower bound, which has more events
    assert threshold_near(counts({0.005: 800.0, 0.01: 950.0}), 0.90, 100) == 0.005
    assert threshold_near(spread, 0.90, min_samples=2000) is None  # too few requests
    assert threshold_near(counts({0.005: 1000.0}), 0.90, 100) is None  # none above any bound
