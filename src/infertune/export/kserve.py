"""A KServe InferenceService (serving.kserve.io/v1beta1) running `infertune serve` as a custom
predictor container, with the same serve.yaml, probes, drain and CPU sizing as the Kubernetes
export, concurrency-based autoscaling, and ``canaryTrafficPercent`` when a canary release is
named (a release folder whose record carries canary_percent, or --canary-percent).

The field names follow KServe's v1beta1 PredictorSpec (minReplicas, maxReplicas, scaleMetric,
scaleTarget, canaryTrafficPercent, containers). KServe's Python SDK ships generated model
classes but no CRD schema, so tests validate the predictor's container against the core/v1
Container schema (kubernetes-validate) and check the InferenceService's own fields by hand.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

from infertune.export.deploy_plan import DeployPlan, Sourced
from infertune.export.kubernetes import PORT, configmap, deployment, header, labels
from infertune.export.yamlemit import Node, dump


def inference_service(p: DeployPlan, image: str) -> dict[str, Node]:
    container = deployment(p, image)["spec"]["template"]["spec"]["containers"][0]
    # KServe names the predictor container kserve-container; Knative (serverless mode) takes
    # one port, named only h2c/http1 if at all, so probes give the number; it drains through
    # its queue-proxy, so the preStop sleep and grace period of the Deployment are left out
    container = {k: v for k, v in container.items() if k != "lifecycle"}
    container["name"] = "kserve-container"
    container["ports"] = [{"containerPort": PORT, "protocol": "TCP"}]
    for probe in ("readinessProbe", "livenessProbe"):
        container[probe] = {**container[probe],
                            "httpGet": {"path": container[probe]["httpGet"]["path"],
                                        "port": PORT}}
    predictor: dict[str, Node] = {
        "minReplicas": p.min_replicas, "maxReplicas": p.max_replicas,
        "scaleMetric": "concurrency", "scaleTarget": p.concurrency_target,
    }
    if p.deadline_ms is not None:
        predictor["timeout"] = Sourced(max(1, math.ceil(p.deadline_ms.value / 1000)),
                                       f"the deadline in whole seconds ({p.deadline_ms.source})")
    if p.canary_percent is not None:
        predictor["canaryTrafficPercent"] = p.canary_percent
    predictor["containers"] = [container]
    predictor["volumes"] = [{"name": "serve-config", "configMap": {"name": f"{p.name}-serve"}}]
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": p.name, "labels": labels(p)},
            "spec": {"predictor": predictor}}


def write_kserve(p: DeployPlan, out: Path, *, image: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = {"configmap.yaml": configmap(p), "inferenceservice.yaml": inference_service(p, image)}
    written = []
    for name, doc in files.items():
        (out / name).write_text(dump(doc, header(p)))
        written.append(out / name)
    shutil.copytree(p.source.variant_dir, out / "variant" / p.source.manifest.id,
                    dirs_exist_ok=True)
    return written
