"""serve/alerts.py: the rule generator `infertune serve` and the Kubernetes export share. Every
threshold comes from the SLO (or the measured capacity), every metric it names is exported,
and promtool accepts the file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from export_checks import promtool_check

from infertune.config import SLO, ServePolicy
from infertune.serve.alerts import (
    AlertThresholds,
    Capacity,
    latency_bracket,
    rule_groups,
    rules_yaml,
    run_slo,
)
from infertune.serve.prometheus_metrics import ServeMetrics


def _rules(t: AlertThresholds) -> dict[str, dict]:
    return {r["alert"]: r for g in rule_groups(t) for r in g["rules"]}


def test_thresholds_come_from_the_slo() -> None:
    t = AlertThresholds.derive(SLO(p95_ms=40, p99_ms=120), ServePolicy(max_queue=100))
    rules = _rules(t)
    assert rules["InfertuneP95OverSLO"]["expr"].endswith(") > 0.04")
    assert rules["InfertuneP99OverSLO"]["expr"].endswith(") > 0.12")
    assert "histogram_quantile(0.99," in rules["InfertuneP99OverSLO"]["expr"]
    assert t.error_ratio.value == 0.01 and "p99" in t.error_ratio.source
    assert rules["InfertuneShedRateSpike"]["expr"].endswith("> 0.01")
    # no measured capacity: half the queue, said so
    assert t.queue_depth.value == 50 and "no measured capacity" in t.queue_depth.source
    assert rules["InfertuneP99OverSLO"]["annotations"]["threshold"] == \
        "0.12 s from scenario.yaml slo.p99_ms = 120 ms"
    # 120 ms falls between the 0.1 s and 0.125 s buckets: the alert says so
    assert "between the 0.1 s and 0.125 s buckets" in \
        rules["InfertuneP99OverSLO"]["annotations"]["description"]


def test_a_p95_slo_allows_five_percent_and_capacity_sets_the_queue_depth() -> None:
    t = AlertThresholds.derive(SLO(p95_ms=200), ServePolicy(max_queue=64, timeout_ms=150),
                               Capacity(goodput_rps=300, service_ms=10, source="fixture"))
    assert t.error_ratio.value == 0.05
    # the policy's timeout_ms is the deadline: floor(300 x (150 - 10) / 1000) = 42
    assert t.queue_depth.value == 42
    capped = AlertThresholds.derive(SLO(p95_ms=200), ServePolicy(max_queue=16),
                                    Capacity(goodput_rps=300, service_ms=10, source="fixture"))
    assert capped.queue_depth.value == 16  # never above what the queue can hold


def test_without_an_slo_there_is_no_latency_rule_and_the_file_says_why() -> None:
    t = AlertThresholds.derive(SLO(), ServePolicy())
    assert not [name for name in _rules(t) if name.endswith("OverSLO")]
    assert "no SLO percentile stated" in t.error_ratio.source
    assert "No latency rule: the scenario states no SLO" in rules_yaml(t)


def test_every_rule_names_only_exported_metrics() -> None:
    # a release's own metrics, and the router's release info the per-stage join reads
    exported = ServeMetrics().exported_names() | {"infertune_release_info"}
    rules = _rules(AlertThresholds.derive(SLO(p50_ms=5, p95_ms=20, p99_ms=50), ServePolicy()))
    assert len(rules) == 10
    for name, rule in rules.items():
        words = rule["expr"].replace("(", " ").replace("{", " ").replace("[", " ").split()
        used = {w for w in words if w.startswith("infertune_")}
        assert used and used <= exported, (name, used - exported)
        assert rule["labels"]["severity"] in ("page", "ticket")


@pytest.mark.parametrize("slo", [SLO(p99_ms=100), SLO(p50_ms=5, p95_ms=20, p99_ms=50), SLO()])
def test_promtool_accepts_the_generated_file(tmp_path: Path, slo: SLO) -> None:
    t = AlertThresholds.derive(slo, ServePolicy())
    path = tmp_path / "alerts.yaml"
    path.write_text(rules_yaml(t))
    assert yaml.safe_load(path.read_text())["groups"] == rule_groups(t)
    assert f"SUCCESS: {len(_rules(t))} rules found" in promtool_check(path)


def test_latency_bracket_and_run_slo(tmp_path: Path) -> None:
    assert latency_bracket(0.1) is None  # a bucket bound: exact
    assert latency_bracket(0.06) is None  # a bound too since the buckets are 1.25x apart
    assert latency_bracket(0.055) == (0.05, 0.06)
    assert latency_bracket(60.0) is None
    assert run_slo(tmp_path) == SLO()
    (tmp_path / "scenario.yaml").write_text("slo: {p99_ms: 80}\n")
    assert run_slo(tmp_path) == SLO(p99_ms=80)
