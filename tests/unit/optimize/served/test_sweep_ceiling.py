"""The scenario's cost ceiling constrains the sweep's choice: a policy whose cost per 1,000
requests (cost per hour over its goodput) is over the ceiling never ranks above one that fits,
and where none fits the report says what would."""

from __future__ import annotations

import pytest

from infertune.config import ServePolicy
from infertune.optimize.served.ceiling import ceiling_first, ceiling_goodput_rps, fits_ceiling
from infertune.optimize.served.policy_sweep import (
    SimStats,
    SweepGrid,
    SweepResult,
    rerank_measured,
    sweep,
)
from infertune.report.run_ceiling import ceiling_advice
from infertune.report.schema import Figure, SloCheck, SloPoint

SLO = {"p99": 40.0}
HOURLY = 0.36  # cost per 1k = 0.36 / (3.6 g) = 0.1 / g


def two_policy_sim(policy: ServePolicy, rate: float) -> SimStats:
    """No batching: p99 10 ms up to 120 req/s, then it sheds. Batches of 4: p99 30 ms up to
    400 req/s. So no batching has the lower tail at the peak and the lower goodput."""
    edge, p99 = (120.0, 10.0) if policy.max_batch_size == 1 else (400.0, 30.0)
    if rate > edge:
        return SimStats(rate, 1e9, 1e9, 1e9, shed=0.5)
    return SimStats(rate, p99 / 2, p99 * 0.8, p99, shed=0.0, utilisation=rate / (2 * edge))


def run(ceiling: float | None) -> SweepResult:
    return sweep(two_policy_sim, variant_id="v", slo=SLO, mean_rps=50.0, peak_rps=100.0,
                 grid=SweepGrid((1, 4), (0.0,), (1,), (64,)), service_ms=lambda b: 5.0,
                 cost_per_hour_usd=HOURLY, cost_ceiling_usd_per_1k=ceiling)


def test_the_ceiling_is_a_goodput_floor() -> None:
    assert ceiling_goodput_rps(0.36, 0.0005) == pytest.approx(200.0)
    assert ceiling_goodput_rps(None, 0.0005) is None and ceiling_goodput_rps(0.36, None) is None
    assert fits_ceiling(200.0, 0.36, 0.0005) is True
    assert fits_ceiling(199.0, 0.36, 0.0005) is False
    assert fits_ceiling(None, 0.36, 0.0005) is False  # nothing within the SLO: unbounded cost
    assert fits_ceiling(10.0, None, 0.0005) is None
    assert ceiling_first([1, 2, 3, 4], lambda g: {1: 50.0, 2: 300.0, 3: None, 4: 250.0}[g],
                         0.36, 0.0005) == [2, 4, 1, 3]


def test_a_policy_over_the_ceiling_never_wins_when_one_fits() -> None:
    free = run(None)
    assert [r.policy["max_batch_size"] for r in free.ranked] == [1, 4]  # the lower tail wins
    assert free.ranked[0].goodput_rps == pytest.approx(120.0, rel=0.01)
    assert free.ranked[1].goodput_rps == pytest.approx(400.0, rel=0.01)
    # $0.0005 per 1k needs 200 req/s: no batching (0.1 / 120 = $0.00083) is over it
    capped = run(0.0005)
    assert [r.policy["max_batch_size"] for r in capped.ranked] == [4, 1]
    assert capped.fits_ceiling(capped.best) is True
    assert capped.fits_ceiling(capped.ranked[1]) is False
    # the measurement re-ranks the load-tested policies, the ceiling still comes first
    for r in capped.ranked:
        r.validated_peak = SimStats(100.0, 5.0, 8.0, 10.0 * r.policy["max_batch_size"], shed=0.0)
    rerank_measured(capped)
    assert capped.best.policy["max_batch_size"] == 4
    again = SweepResult.from_dict(capped.to_dict())
    assert again.cost_ceiling_usd_per_1k == 0.0005 and again.cost_per_hour_usd == HOURLY


def _check(goodput: float, ceiling: float) -> SloCheck:
    hw = "test cpu"
    point = SloPoint(label="peak", offered=Figure.measured(100.0, "requests/s", hw, 3000,
                                                   artifact="serving.json"),
                     goodput=Figure.measured(goodput, "requests/s", hw, 3000,
                                                   artifact="serving.json"))
    cost = HOURLY / (3.6 * goodput)
    return SloCheck(targets=SLO, points=[point], within_ceiling=cost <= ceiling,
                    cost_ceiling=Figure(value=ceiling, unit="USD per 1,000 requests",
                                        source="estimate", basis="stated in the scenario"))


def test_over_the_ceiling_the_report_says_what_would_fit() -> None:
    lines = ceiling_advice(_check(120.0, 0.0005), run(0.0005), HOURLY)
    assert lines[0] == ("to fit the cost ceiling of $0.0005 per 1,000 requests at the "
                        "scenario's $0.36 per hour, one instance must serve at least 200.0 "
                        "requests/s within the SLO (0.36 / (3.6 x 0.0005)); the recommended "
                        "configuration measured 120.0 requests/s, so it is over the ceiling")
    assert lines[1].startswith("estimate: policy b4-w0ms-x1-q64 fits by the simulator's "
                               "goodput of 397.0 requests/s")  # bisection
    assert lines[2] == ("at the measured 120.0 requests/s it would fit on a machine costing at "
                        "most $0.216 per hour, or with a configuration that serves 1.7x the "
                        "measured goodput here")
    # nothing swept fits $0.0001 (1,000 req/s needed)
    none = ceiling_advice(_check(120.0, 0.0001), run(0.0001), HOURLY)
    assert none[1].startswith("none of the 2 leading policies swept fits it")
    # within the ceiling: nothing to say; no cost per hour: it cannot be checked
    assert ceiling_advice(_check(400.0, 0.0005), run(0.0005), HOURLY) == []
    assert ceiling_advice(_check(120.0, 0.0005), run(0.0005), None)[0].endswith(
        "the scenario states no deployment.cost_per_hour_usd")
