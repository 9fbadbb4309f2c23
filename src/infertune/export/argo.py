"""Argo Rollouts: an AnalysisTemplate whose web metric asks infertune's analysis endpoint for
the always-valid verdict over the canary and stable pods' Prometheus series, and the endpoint's
Deployment and Service.

    analysis-endpoint.yaml   `infertune analysis --prometheus URL` (rollout/analysis.py)
    analysistemplate.yaml    argoproj.io/v1alpha1 AnalysisTemplate, metric infertune-gates
    extras/rollout-strategy-snippet.yaml   how a Rollout's canary strategy runs it

The template's args are the two ReplicaSets' pod-template hashes (Argo fills them with
``valueFrom.podTemplateHashValue: Latest | Stable``); the endpoint selects each arm's series by
``rollouts_pod_template_hash``, the pod label rollouts-pod-template-hash as Prometheus's
kubernetes_sd labelmap spells it (the ServiceMonitor of the kubernetes export keeps pod labels
when ``podTargetLabels`` names it; see extras). The metric runs in the background for the whole
rollout: the always-valid intervals keep the false-rollback rate at or below alpha however
often it looks, so it fails the rollout only when a gate is sure the canary is worse.

No CRD schema for Argo Rollouts ships on PyPI, so tests check these objects field by field
against the field names of the v1alpha1 API (AnalysisTemplateSpec, Metric, WebMetric).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from infertune.export.deploy_plan import DeployPlan, Sourced
from infertune.export.kubernetes import header, labels
from infertune.export.yamlemit import Node, dump

ANALYSIS_PORT = 8080
ARGO_LABEL = "rollouts_pod_template_hash"
INTERVAL = Sourced("30s", "a choice: one look per 30 s; any interval keeps the guarantee")


def analysis_name(p: DeployPlan) -> str:
    return f"{p.name}-analysis"[:63]


def analysis_url(p: DeployPlan, namespace: str) -> str:
    return f"http://{analysis_name(p)}.{namespace}.svc:{ANALYSIS_PORT}"


def analysis_endpoint(p: DeployPlan, image: str, prometheus_url: str) -> list[dict[str, Node]]:
    """The endpoint's Deployment and Service (it holds no model: one small replica)."""
    name = analysis_name(p)
    selector: dict[str, Node] = {"app.kubernetes.io/name": name}
    pod_labels: dict[str, Node] = {**labels(p), "app.kubernetes.io/component": "analysis",
                                   **selector}
    meta: dict[str, Node] = {"name": name, "labels": pod_labels}
    container: dict[str, Node] = {
        "name": "analysis", "image": Sourced(image, "--image (the same infertune image)"),
        "args": ["infertune", "analysis", "--prometheus",
                 Sourced(prometheus_url, "--prometheus-url"), "--host", "0.0.0.0", "--port",
                 str(ANALYSIS_PORT)],
        "ports": [{"name": "http", "containerPort": ANALYSIS_PORT}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
    }
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
                  "spec": {"replicas": 1, "selector": {"matchLabels": selector},
                           "template": {"metadata": {"labels": pod_labels},
                                        "spec": {"containers": [container]}}}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": meta,
               "spec": {"selector": selector,
                        "ports": [{"name": "http", "port": ANALYSIS_PORT,
                                   "targetPort": "http"}]}}
    return [deployment, service]


def analysis_template(p: DeployPlan, namespace: str) -> dict[str, Node]:
    url = (f"{analysis_url(p, namespace)}/v1/analysis?label={ARGO_LABEL}"
           "&canary={{args.canary-hash}}&stable={{args.stable-hash}}")
    metric: dict[str, Node] = {
        "name": "infertune-gates",
        "interval": INTERVAL,
        # the endpoint answers pass, wait or fail: only fail ends the rollout
        "successCondition": 'result.verdict != "fail"',
        "failureCondition": 'result.verdict == "fail"',
        "failureLimit": Sourced(0, "the gates fail only when sure: one failure rolls back"),
        "consecutiveErrorLimit": Sourced(4, "a choice: Prometheus or the endpoint "
                                         "unreachable for 4 looks in a row"),
        "provider": {"web": {"url": url, "jsonPath": "{$}", "timeoutSeconds": 20}},
    }
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "AnalysisTemplate",
            "metadata": {"name": f"{p.name}-infertune-gates", "labels": labels(p)},
            "spec": {"args": [{"name": "canary-hash"}, {"name": "stable-hash"}],
                     "metrics": [metric]}}


def strategy_snippet(p: DeployPlan) -> dict[str, Node]:
    """The part of a Rollout that runs the template in the background of its canary steps."""
    return {"strategy": {"canary": {
        "analysis": {"templates": [{"templateName": f"{p.name}-infertune-gates"}],
                     "args": [{"name": "canary-hash",
                               "valueFrom": {"podTemplateHashValue": "Latest"}},
                              {"name": "stable-hash",
                               "valueFrom": {"podTemplateHashValue": "Stable"}}]},
        "steps": [{"setWeight": Sourced(20, "rollout/canary_plan.py: the canary stays at or under "
                                        "20% until its gates had the sample they need")},
                  {"pause": {"duration": "5m"}}, {"setWeight": 50},
                  {"pause": {"duration": "5m"}}]}}}


def write_argo(p: DeployPlan, out: Path, *, image: str, prometheus_url: str,
               namespace: str = "default") -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "extras").mkdir(exist_ok=True)
    files = {"analysis-endpoint.yaml": analysis_endpoint(p, image, prometheus_url),
             "analysistemplate.yaml": [analysis_template(p, namespace)],
             "extras/rollout-strategy-snippet.yaml": [strategy_snippet(p)]}
    written = []
    for name, docs in files.items():
        text = "---\n".join(dump(doc, header(p)) for doc in docs)
        (out / name).write_text(text)
        written.append(out / name)
    shutil.copytree(p.source.variant_dir, out / "variant" / p.source.manifest.id,
                    dirs_exist_ok=True)
    return written
