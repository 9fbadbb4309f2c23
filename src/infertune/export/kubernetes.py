"""Kubernetes manifests that run `infertune serve` with the run's measured configuration.

    configmap.yaml        serve.yaml: the ServePolicy the run chose (batching, queue, deadline)
    deployment.yaml       probes on /readyz and /healthz, a preStop drain inside the grace
                          period, CPU requests = limits = the cores the run measured on
    service.yaml, pdb.yaml, servicemonitor.yaml
    hpa.yaml              autoscaling/v2 on the infertune_queue_depth pods metric (served by
                          prometheus-adapter: extras/prometheus-adapter-values.yaml), or
    keda-scaledobject.yaml  a KEDA ScaledObject on the same metric (--autoscaler keda)
    prometheusrule.yaml   the alert rules of serve/alerts.py, thresholds from the SLO
    extras/alerts.yaml    the same rules as a plain Prometheus rule file

The image must hold infertune (serve and the engine's extra: onnx, openvino or torch) and the
variant folder at /models/<variant id>; the folder is copied to <out>/variant/<id> for the image
build.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Literal

from infertune.export.deploy_plan import DeployPlan, Sourced
from infertune.export.yamlemit import Node, dump
from infertune.serve.alerts import rule_groups, rules_yaml

Autoscaler = Literal["hpa", "keda"]
PORT = 8000
CONFIG_DIR = "/etc/infertune"
QUEUE_METRIC = "infertune_queue_depth"
GPU_RESOURCE = "nvidia.com/gpu"  # the NVIDIA device plugin's resource name


def labels(p: DeployPlan) -> dict[str, Node]:
    return {"app.kubernetes.io/name": p.name, "app.kubernetes.io/part-of": "infertune",
            "infertune.dev/variant": p.source.manifest.id[:63]}


def _meta(p: DeployPlan, suffix: str = "") -> dict[str, Node]:
    return {"name": p.name + suffix, "labels": labels(p)}


def serve_config(p: DeployPlan) -> dict[str, Node]:
    """serve.yaml: every ServePolicy field of the run, the deadline made explicit (a variant
    folder, unlike a run folder, carries no SLO for serve to derive it from)."""
    policy = p.source.policy.model_dump(mode="json")
    doc: dict[str, Node] = {}
    for key, value in policy.items():
        doc[key] = value if value is None else Sourced(value, f"{p.source.policy_origin}")
    if p.deadline_ms is not None:
        doc["timeout_ms"] = p.deadline_ms
    return doc


def configmap(p: DeployPlan) -> dict[str, Node]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(p, "-serve"),
            "data": {"serve.yaml": dump(serve_config(p))}}


def image_extras(p: DeployPlan) -> str:
    """The infertune extras the image needs to run this variant's engine."""
    m = p.source.manifest
    engine = "gpu" if m.gpu is not None else \
        {"openvino": "openvino", "torch": "torch"}.get(m.runtime, "onnx")
    return f"serve and {engine} extras: pip install 'infertune[serve,{engine}]'"


def gpu_limit(p: DeployPlan) -> dict[str, Node]:
    """The GPU a GPU variant needs (extended resources are set as limits only; Kubernetes
    makes the request equal), or nothing for a CPU variant."""
    m = p.source.manifest
    if not m.on_gpu():
        return {}
    return {GPU_RESOURCE: Sourced(1, f"variant {m.id} runs on one NVIDIA GPU "
                                     f"({m.gpu.provider if m.gpu else 'torch cuda'})")}


def deployment(p: DeployPlan, image: str) -> dict[str, Node]:
    cpu = Sourced(f"{p.cpus.value:g}", p.cpus.source)
    container: dict[str, Node] = {
        "name": "infertune",
        "image": Sourced(image, f"--image: an image holding infertune ({image_extras(p)}) "
                         f"and this variant at /models/{p.source.manifest.id}"),
        "args": ["infertune", "serve", f"/models/{p.source.manifest.id}", "--config",
                 f"{CONFIG_DIR}/serve.yaml", "--host", "0.0.0.0", "--port", str(PORT)],
        "ports": [{"name": "http", "containerPort": PORT}],
        # ready only after warm-up; the periods are our choice (not measured)
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"},
                           "periodSeconds": 5, "failureThreshold": 2},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                          "periodSeconds": 10, "failureThreshold": 3},
        "lifecycle": {"preStop": {"exec": {"command": [
            "sleep", Sourced(str(p.pre_stop_s.value), p.pre_stop_s.source)]}}},
        "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu, **gpu_limit(p)}},
        "volumeMounts": [{"name": "serve-config", "mountPath": CONFIG_DIR, "readOnly": True}],
    }
    pod: dict[str, Node] = {"terminationGracePeriodSeconds": p.grace_s,
                            "containers": [container],
                            "volumes": [{"name": "serve-config",
                                         "configMap": {"name": f"{p.name}-serve"}}]}
    if p.source.manifest.on_gpu():
        # GPU node pools carry this taint (GKE, AKS, the NVIDIA GPU operator's defaults)
        pod["tolerations"] = [{"key": GPU_RESOURCE, "operator": "Exists",
                               "effect": "NoSchedule"}]
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(p),
        "spec": {
            "replicas": p.min_replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": p.name}},
            "template": {
                "metadata": {"labels": labels(p)},
                "spec": pod,
            },
        },
    }


def service(p: DeployPlan) -> dict[str, Node]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(p),
            "spec": {"selector": {"app.kubernetes.io/name": p.name},
                     "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}


def pod_disruption_budget(p: DeployPlan) -> dict[str, Node]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(p),
            "spec": {"maxUnavailable": Sourced(1, "our choice: drain one pod at a time, so "
                                               "capacity stays at (replicas - 1) x goodput"),
                     "selector": {"matchLabels": {"app.kubernetes.io/name": p.name}}}}


def hpa(p: DeployPlan) -> dict[str, Node]:
    target = Sourced(str(p.queue_target.value), p.queue_target.source)
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": _meta(p),
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                        "name": p.name},
                     "minReplicas": p.min_replicas, "maxReplicas": p.max_replicas,
                     "metrics": [{"type": "Pods", "pods": {
                         "metric": {"name": QUEUE_METRIC},
                         "target": {"type": "AverageValue", "averageValue": target}}}]}}


def keda_scaled_object(p: DeployPlan, prometheus_url: str) -> dict[str, Node]:
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": _meta(p),
            "spec": {"scaleTargetRef": {"name": p.name},
                     "minReplicaCount": p.min_replicas, "maxReplicaCount": p.max_replicas,
                     "triggers": [{"type": "prometheus", "metadata": {
                         "serverAddress": prometheus_url,
                         # pods of the Deployment are named <name>-<hash>-<id>
                         "query": f'sum({QUEUE_METRIC}{{pod=~"{p.name}-.*"}})',
                         # KEDA divides the query by this per-replica target
                         "threshold": Sourced(str(p.queue_target.value),
                                              p.queue_target.source)}}]}}


def prometheus_rule(p: DeployPlan) -> dict[str, Node]:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": _meta(p), "spec": {"groups": rule_groups(p.alerts)}}


def service_monitor(p: DeployPlan) -> dict[str, Node]:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": _meta(p),
            "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": p.name}},
                     "endpoints": [{"port": "http", "path": "/metrics", "interval": "15s"}]}}


def adapter_values(p: DeployPlan) -> dict[str, Any]:
    """prometheus-adapter Helm values exposing the queue depth as a pods metric for the HPA."""
    return {"rules": {"custom": [{
        "seriesQuery": f'{QUEUE_METRIC}{{namespace!="",pod!=""}}',
        "resources": {"overrides": {"namespace": {"resource": "namespace"},
                                    "pod": {"resource": "pod"}}},
        "name": {"matches": QUEUE_METRIC, "as": QUEUE_METRIC},
        "metricsQuery": "max(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)"}]}}


def manifests(p: DeployPlan, *, image: str, autoscaler: Autoscaler,
              prometheus_url: str) -> dict[str, dict[str, Node]]:
    """File name -> Kubernetes object, in apply order."""
    docs = {"configmap.yaml": configmap(p), "deployment.yaml": deployment(p, image),
            "service.yaml": service(p), "pdb.yaml": pod_disruption_budget(p)}
    if autoscaler == "keda":
        docs["keda-scaledobject.yaml"] = keda_scaled_object(p, prometheus_url)
    else:
        docs["hpa.yaml"] = hpa(p)
    docs["servicemonitor.yaml"] = service_monitor(p)
    docs["prometheusrule.yaml"] = prometheus_rule(p)
    return docs


def header(p: DeployPlan) -> list[str]:
    return [f"Generated by `infertune export` from {p.source.label}, variant "
            f"{p.source.manifest.id}.", "Each number's comment says where it came from; "
            "regenerate instead of editing."]


def write_kubernetes(p: DeployPlan, out: Path, *, image: str, autoscaler: Autoscaler = "hpa",
                     prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"
                     ) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, doc in manifests(p, image=image, autoscaler=autoscaler,
                               prometheus_url=prometheus_url).items():
        (out / name).write_text(dump(doc, header(p)))
        written.append(out / name)
    extras = out / "extras"
    extras.mkdir(exist_ok=True)
    (extras / "alerts.yaml").write_text(rules_yaml(p.alerts))
    (extras / "serve.yaml").write_text(dump(serve_config(p), header(p)))
    if autoscaler == "hpa":
        (extras / "prometheus-adapter-values.yaml").write_text(dump(adapter_values(p), [
            "Helm values for prometheus-adapter: serves infertune_queue_depth to the HPA."]))
    variant = out / "variant" / p.source.manifest.id
    shutil.copytree(p.source.variant_dir, variant, dirs_exist_ok=True)
    return written
