"""Flagger: a Canary whose analysis asks infertune's analysis endpoint through two webhooks,
and the endpoint's Deployment and Service (the same as the Argo export's).

    analysis-endpoint.yaml   `infertune analysis --prometheus URL` (rollout/analysis.py)
    canary.yaml              flagger.app/v1beta1 Canary targeting the Deployment of the
                             kubernetes export (`infertune export --to kubernetes`)

    webhook            type               answers 200 when              else
    infertune-gates    rollout            no gate is sure it is worse   a failed check
    infertune-promote  confirm-promotion  every gate has passed         promotion held back

Flagger runs the primary as ``<name>-primary`` and relabels its pods'
``app.kubernetes.io/name`` to that name, so the endpoint selects the arms by
``app_kubernetes_io_name`` (that label as Prometheus's labelmap spells it): ``<name>`` for the
canary, ``<name>-primary`` for the stable. Tests check the Canary field by field against
Flagger's v1beta1 field names (no CRD schema ships on PyPI).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from infertune.export.argo import analysis_endpoint, analysis_url
from infertune.export.deploy_plan import DeployPlan, Sourced
from infertune.export.kubernetes import PORT, header, labels
from infertune.export.yamlemit import Node, dump

FLAGGER_LABEL = "app_kubernetes_io_name"


def canary(p: DeployPlan, namespace: str) -> dict[str, Node]:
    base = analysis_url(p, namespace)
    meta = {"label": FLAGGER_LABEL, "canary": p.name, "stable": f"{p.name}-primary"}
    hooks: list[Node] = [
        {"name": "infertune-gates", "type": "rollout", "url": f"{base}/v1/flagger/check",
         "timeout": "20s", "metadata": meta},
        {"name": "infertune-promote", "type": "confirm-promotion",
         "url": f"{base}/v1/flagger/promote", "timeout": "20s", "metadata": meta},
    ]
    analysis: dict[str, Node] = {
        "interval": Sourced("30s", "a choice: one look per 30 s; any interval keeps the "
                            "always-valid guarantee"),
        "threshold": Sourced(1, "the gates fail only when sure: one failed check rolls back"),
        "stepWeights": [Sourced(20, "rollout/canary_plan.py: at or under 20% until the gates had "
                                "their sample"), 50],
        "webhooks": hooks,
    }
    return {"apiVersion": "flagger.app/v1beta1", "kind": "Canary",
            "metadata": {"name": p.name, "labels": labels(p)},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                   "name": p.name},
                     "service": {"port": 80, "targetPort": PORT},
                     "analysis": analysis}}


def write_flagger(p: DeployPlan, out: Path, *, image: str, prometheus_url: str,
                  namespace: str = "default") -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = {"analysis-endpoint.yaml": analysis_endpoint(p, image, prometheus_url),
             "canary.yaml": [canary(p, namespace)]}
    written = []
    for name, docs in files.items():
        (out / name).write_text("---\n".join(dump(doc, header(p)) for doc in docs))
        written.append(out / name)
    shutil.copytree(p.source.variant_dir, out / "variant" / p.source.manifest.id,
                    dirs_exist_ok=True)
    return written
