"""The Kubernetes manifests: every core object validates against the Kubernetes 1.33 schemas
(kubernetes-validate, strict: unknown fields fail), the PrometheusRule's rules pass promtool,
and the numbers equal the run's measured policy, SLO, traffic and cores."""

from __future__ import annotations

import math
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from export_checks import promtool_check
from export_run import CORES, GOODPUT_RPS, POLICY, SERVICE_P50_MS, TRAFFIC

from infertune.config import CLIENT_DEADLINE_FACTOR, ServePolicy
from infertune.export.deploy_plan import plan
from infertune.export.kubernetes import write_kubernetes
from infertune.export.source import read_source
from infertune.serve.prometheus_metrics import ServeMetrics

K8S_VERSION = "1.33.0"  # the schemas every manifest is checked against (pinned)
CORE_KINDS = {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget",
              "HorizontalPodAutoscaler"}


def _write(run: Path, out: Path, autoscaler: str) -> dict[str, dict]:
    write_kubernetes(plan(read_source(run)), out, image="registry.example/infertune:1",
                     autoscaler=autoscaler)  # type: ignore[arg-type]
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted(out.glob("*.yaml"))}


@pytest.fixture(scope="module")
def hpa_docs(text_run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    return _write(text_run, tmp_path_factory.mktemp("k8s_hpa"), "hpa")


def test_every_core_manifest_validates_against_the_kubernetes_schema(hpa_docs) -> None:
    kinds = {doc["kind"] for doc in hpa_docs.values()}
    assert kinds == CORE_KINDS | {"PrometheusRule", "ServiceMonitor"}
    for name, doc in hpa_docs.items():
        if doc["kind"] in CORE_KINDS:
            assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == "1.33", name


def test_the_validator_does_reject_a_broken_manifest(hpa_docs) -> None:
    broken = yaml.safe_load(yaml.safe_dump(hpa_docs["deployment.yaml"]))
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["periodSecond"] = 5
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_the_deployment_runs_the_measured_configuration(hpa_docs) -> None:
    pod = hpa_docs["deployment.yaml"]["spec"]["template"]["spec"]
    [c] = pod["containers"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["resources"]["requests"] == c["resources"]["limits"] == {"cpu": str(CORES)}
    pre_stop = int(c["lifecycle"]["preStop"]["exec"]["command"][1])
    # the client deadline (10 x the loosest SLO target); the measured p50
    deadline_s, service_s = CLIENT_DEADLINE_FACTOR * 0.100, SERVICE_P50_MS / 1000
    assert pod["terminationGracePeriodSeconds"] == math.ceil(pre_stop + deadline_s + service_s) + 1
    assert pre_stop < pod["terminationGracePeriodSeconds"]
    assert c["args"][:3] == ["infertune", "serve", "/models/ort_int8_dynamic_per_channel"]
    # serve.yaml in the ConfigMap is the run's ServePolicy with the deadline made explicit
    served = ServePolicy.model_validate(yaml.safe_load(
        hpa_docs["configmap.yaml"]["data"]["serve.yaml"]))
    assert served == POLICY.model_copy(update={"timeout_ms": deadline_s * 1000})
    assert hpa_docs["pdb.yaml"]["spec"]["maxUnavailable"] == 1


def test_the_autoscaler_follows_goodput_traffic_and_slo(hpa_docs) -> None:
    spec = hpa_docs["hpa.yaml"]["spec"]
    assert spec["minReplicas"] == math.ceil(TRAFFIC["mean_rps"] / GOODPUT_RPS)  # 2
    assert spec["maxReplicas"] == math.ceil(TRAFFIC["peak_rps"] / GOODPUT_RPS)  # 4
    [metric] = spec["metrics"]
    assert metric["pods"]["metric"]["name"] == "infertune_queue_depth"
    # Little's law: goodput x (tightest SLO target 50 ms - service 4 ms) = 8.28 -> 8 waiting
    expected = math.floor(GOODPUT_RPS * (0.050 - SERVICE_P50_MS / 1000))
    assert metric["pods"]["target"]["averageValue"] == str(expected) == "8"
    assert hpa_docs["deployment.yaml"]["spec"]["replicas"] == spec["minReplicas"]


def test_keda_is_the_other_choice(text_run: Path, tmp_path: Path) -> None:
    docs = _write(text_run, tmp_path, "keda")
    assert "hpa.yaml" not in docs and not (tmp_path / "extras" /
                                           "prometheus-adapter-values.yaml").exists()
    obj = docs["keda-scaledobject.yaml"]
    assert obj["apiVersion"] == "keda.sh/v1alpha1" and obj["kind"] == "ScaledObject"
    spec = obj["spec"]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (2, 4)
    [trigger] = spec["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metadata"]["threshold"] == "8"
    assert "infertune_queue_depth" in trigger["metadata"]["query"]


def test_the_prometheus_rule_passes_promtool_with_slo_thresholds(hpa_docs, tmp_path) -> None:
    groups = hpa_docs["prometheusrule.yaml"]["spec"]["groups"]
    rules = {r["alert"]: r for g in groups for r in g["rules"]}
    assert rules["InfertuneP99OverSLO"]["expr"].endswith("> 0.1")  # slo.p99_ms = 100
    assert rules["InfertuneP95OverSLO"]["expr"].endswith("> 0.05")  # slo.p95_ms = 50
    assert rules["InfertuneErrorRateSpike"]["expr"].endswith("> 0.01")  # 1 - 0.99
    # depth whose wait uses up the 1000 ms client deadline: floor(180 x 0.996) = 179, capped
    # at what the queue holds (max_queue 128)
    assert rules["InfertuneQueueDepthHigh"]["expr"].endswith(f"> {POLICY.max_queue}")
    exported = ServeMetrics().exported_names() | {"infertune_release_info"}  # the router's
    for rule in rules.values():
        for word in rule["expr"].replace("(", " ").replace("{", " ").replace("[", " ").split():
            if word.startswith("infertune_"):
                assert word in exported, (rule["alert"], word)
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": groups}))
    assert f"SUCCESS: {len(rules)} rules found" in promtool_check(rules_file)


def test_every_number_says_where_it_came_from(text_run: Path, tmp_path: Path) -> None:
    _write(text_run, tmp_path, "hpa")
    text = (tmp_path / "hpa.yaml").read_text()
    assert "minReplicas: 2  # ceil(scenario.yaml traffic.mean_rps 200 / goodput 180" in text
    deployment = (tmp_path / "deployment.yaml").read_text()
    assert 'cpu: "4"  # hardware.json effective_cores' in deployment
    assert (tmp_path / "variant" / "ort_int8_dynamic_per_channel" / "manifest.json").is_file()
