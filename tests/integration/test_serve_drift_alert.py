"""Drift injected into live traffic: `infertune serve --registry --stable A` (its own process)
answers inputs from the reference distribution, then from another one; /metrics shows the PSI
of that release's rows rise past the alert threshold, and `promtool test rules` fires the
generated InfertuneInputDrift alert on the values /metrics showed (and not on the values of
the unshifted traffic)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml
from onnx_graphs import WIDTH
from prometheus_client.parser import text_string_to_metric_families
from release_server import release_server
from rollout_variants import mlp_run
from services import missing_service

from infertune.config import SLO, ServePolicy
from infertune.rollout.release_registry import Registry
from infertune.serve.alerts import AlertThresholds, rule_groups, rules_yaml
from infertune.serve.live_drift import ALERT_PSI

ENV = {"DRIFT_KEY": "k3y"}


def _send(client: httpx.Client, rng: np.random.Generator, n: int, mean: float) -> None:
    for _ in range(n):
        body = {"inputs": rng.normal(mean, 1.0, size=(1, WIDTH)).round(3).tolist()}
        assert client.post("/v1/predict", json=body).status_code == 200


def _psi(client: httpx.Client) -> dict[str, float]:
    samples = [s for f in text_string_to_metric_families(client.get("/metrics").text)
               for s in f.samples if s.name == "infertune_drift_psi"]
    assert {s.labels["release"] for s in samples} <= {"A"}
    return {s.labels["feature"]: s.value for s in samples}


def _promtool_fires(tmp_path: Path, value: float) -> bool:
    """Whether the generated rule fires on a PSI series holding ``value`` for 10 minutes."""
    if shutil.which("promtool") is None:
        missing_service("promtool not installed (bash scripts/ensure_services.sh)")
    rules = tmp_path / "alerts.yaml"
    thresholds = AlertThresholds.derive(SLO(p99_ms=100), ServePolicy())
    rules.write_text(rules_yaml(thresholds))
    rule = next(r for g in rule_groups(thresholds) for r in g["rules"]
                if r["alert"] == "InfertuneInputDrift")
    labels = {"release": "A", "instance": "127.0.0.1:8000", "feature": "input_mean"}
    series = "infertune_drift_psi{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
    shown = float(f"{value:.4f}")
    # the annotations as Prometheus renders the templates for this series
    annotations = {**rule["annotations"], "summary": rule["annotations"]["summary"].replace(
        "{{ $labels.feature }}", "input_mean").replace("{{ $value }}", repr(shown))}
    expected = ([{"exp_labels": {**labels, "severity": "ticket"},
                  "exp_annotations": annotations}] if value > ALERT_PSI else [])
    test = {"rule_files": [str(rules)], "evaluation_interval": "1m",
            "tests": [{"interval": "1m",
                       "input_series": [{"series": series, "values": f"{shown}x10"}],
                       "alert_rule_test": [{"eval_time": "7m", "alertname":
                                            "InfertuneInputDrift", "exp_alerts": expected}]}]}
    path = tmp_path / f"drift-test-{value:.4f}.yaml"
    path.write_text(yaml.safe_dump(test))
    done = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr  # the expectation held
    return value > ALERT_PSI


@pytest.mark.slow
@pytest.mark.timing_free  # seeded rows, sequential requests, --timeout-ms 30000: PSI is counted
# over rows, never seconds, and promtool evaluates its own clock
def test_drift_in_live_traffic_shows_on_metrics_and_fires_the_alert(tmp_path,
                                                                   monkeypatch) -> None:
    reg = Registry(tmp_path / "registry")
    reg.add(mlp_run(tmp_path / "run-a"), "A")
    monkeypatch.setenv("DRIFT_KEY", ENV["DRIFT_KEY"])
    rng = np.random.default_rng(3)
    with release_server(reg.root, "A", api_key_env="DRIFT_KEY", env=ENV) as url, \
            httpx.Client(base_url=url, headers={"X-API-Key": "k3y"}, timeout=30) as client:
        _send(client, rng, 500, 0.0)  # the reference: the first 500 rows
        assert _psi(client) == {}
        _send(client, rng, 500, 0.0)  # the same distribution
        steady = _psi(client)
        _send(client, rng, 500, 1.5)  # inputs from another distribution
        drifted = _psi(client)
    assert set(steady) == set(drifted) == {"input_mean", "output_norm"}
    # unshifted: near the sampling floor of 9 x (1/500 + 1/500) = 0.036, far under the alert
    assert max(steady.values()) < ALERT_PSI / 2 < ALERT_PSI < drifted["input_mean"]
    assert drifted["output_norm"] > steady["output_norm"]
    assert _promtool_fires(tmp_path, drifted["input_mean"])
    assert not _promtool_fires(tmp_path, steady["input_mean"])
