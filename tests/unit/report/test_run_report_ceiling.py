"""The scenario's cost ceiling reaches the run's report (report/run_report.py): a configuration
whose measured cost per 1,000 requests is over the ceiling is reported outside it, with what
would fit; one within it is not."""

from __future__ import annotations

import pytest

from infertune.config import Scenario, ServePolicy
from infertune.measure.tail_interval import TailInterval
from infertune.optimize.findings import by_stage
from infertune.optimize.record import RunRecord
from infertune.optimize.served.policy_sweep import SimStats, SweepGrid, sweep, validation_key
from infertune.optimize.served.traffic import Validation
from infertune.report.run_report import build_run_report

HOURLY = 0.36  # USD per hour: cost per 1k = 0.36 / (3.6 x goodput) = 0.1 / goodput


def fake_sim(policy: ServePolicy, rate: float) -> SimStats:
    service = 4.0 + policy.max_batch_size
    return SimStats(rate, service, service * 1.5, service * 2.0, shed=0.0, utilisation=0.5)


def run_with_ceiling(ceiling: float) -> RunRecord:
    """The served configuration held the SLO at the peak, 30 req/s offered, 29.5 achieved,
    nothing shed: goodput 29.5 req/s, cost per 1k 0.1 / 29.5 = $0.00339."""
    sc = Scenario.model_validate({
        "slo": {"p95_ms": 50, "p99_ms": 80},
        "traffic": {"pattern": "steady", "mean_rps": 10, "peak_rps": 30},
        "deployment": {"cost_per_hour_usd": HOURLY},
        "constraints": {"cost_ceiling_usd_per_1k": ceiling}})
    result = sweep(fake_sim, variant_id="int8", slo=sc.slo.targets(), mean_rps=10, peak_rps=30,
                   grid=SweepGrid((1, 4), (0.0,), (1,), (64,)), service_ms=lambda b: 4.0 + b,
                   cost_per_hour_usd=HOURLY, cost_ceiling_usd_per_1k=ceiling, timeout_ms=800.0)
    peak = SimStats(30, 7.0, 12.0, 20.0, shed=0.0, requests=2000)
    result.best.validated_peak = peak
    intervals = {k: TailInterval(q, v, 0.9 * v, 1.1 * v, 2000, 12, 1.0)
                 for k, q, v in (("p50", 0.5, 7.0), ("p95", 0.95, 12.0), ("p99", 0.99, 20.0))}
    return RunRecord(
        model="m", scenario=sc, data_source="held.jsonl", quick=True, task="embedding",
        baseline_runtime="torch", quality_count=64, **by_stage(hardware_label="test cpu (2 cores)",
        sweep=result, validations={validation_key("int8", result.best.policy_id, "peak"):
                                   Validation(peak, 29.5, 0.4, 6.0, [], intervals=intervals)}))


def test_a_configuration_over_the_ceiling_is_reported_outside_it_with_what_would_fit() -> None:
    check = build_run_report(run_with_ceiling(0.002)).slo_check  # needs 50 req/s
    assert check is not None and check.cost_ceiling is not None
    assert check.cost_ceiling.value == 0.002
    peak = next(p for p in check.points if p.label == "peak")
    assert peak.cost_per_1k is not None
    assert peak.cost_per_1k.value == pytest.approx(0.1 / 29.5, rel=1e-3)
    assert check.within_ceiling is False
    assert ("to fit the cost ceiling of $0.002 per 1,000 requests at the scenario's $0.36 per "
            "hour, one instance must serve at least 50.0 requests/s within the SLO (0.36 / "
            "(3.6 x 0.002)); the recommended configuration measured 29.5 requests/s, so it is "
            "over the ceiling") in check.what_would


def test_a_configuration_within_the_ceiling_gets_no_ceiling_line() -> None:
    check = build_run_report(run_with_ceiling(0.004)).slo_check  # needs 25 req/s
    assert check is not None and check.within_ceiling is True
    assert not any("cost ceiling" in w for w in check.what_would)
