"""The KServe InferenceService. KServe's Python SDK (kserve on PyPI) ships generated model
classes, not the CRD schema, so the predictor's container and volumes are validated as a
core/v1 Pod (kubernetes-validate, strict, Kubernetes 1.33) and the InferenceService's own
fields are checked here against the names of KServe's v1beta1 PredictorSpec."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import yaml

from infertune.export.deploy_plan import Overrides, plan
from infertune.export.kserve import write_kserve
from infertune.export.source import read_source

K8S_VERSION = "1.33.0"
# v1beta1 PredictorSpec fields the export writes (KServe SDK 0.21.0 attribute_map names)
PREDICTOR_FIELDS = {"minReplicas", "maxReplicas", "scaleMetric", "scaleTarget", "timeout",
                    "canaryTrafficPercent", "containers", "volumes"}


def _isvc(run: Path, out: Path, overrides: Overrides | None = None) -> dict:
    write_kserve(plan(read_source(run), overrides), out, image="registry.example/infertune:1")
    return yaml.safe_load((out / "inferenceservice.yaml").read_text())


def test_the_inference_service_serves_the_measured_configuration(text_run: Path,
                                                                  tmp_path: Path) -> None:
    isvc = _isvc(text_run, tmp_path)
    assert (isvc["apiVersion"], isvc["kind"]) == ("serving.kserve.io/v1beta1", "InferenceService")
    predictor = isvc["spec"]["predictor"]
    assert set(predictor) <= PREDICTOR_FIELDS
    assert "canaryTrafficPercent" not in predictor  # no canary release named
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (2, 4)
    assert (predictor["scaleMetric"], predictor["scaleTarget"]) == ("concurrency", 9)
    assert predictor["timeout"] == 1  # the 100 ms deadline, in whole seconds
    [container] = predictor["containers"]
    assert container["name"] == "kserve-container"
    assert container["resources"]["limits"] == {"cpu": "4"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "predictor"},
           "spec": {"containers": predictor["containers"], "volumes": predictor["volumes"]}}
    assert kubernetes_validate.validate(pod, K8S_VERSION, strict=True) == "1.33"
    configmap = yaml.safe_load((tmp_path / "configmap.yaml").read_text())
    assert kubernetes_validate.validate(configmap, K8S_VERSION, strict=True) == "1.33"
    assert configmap["metadata"]["name"] == predictor["volumes"][0]["configMap"]["name"]


def test_a_named_canary_sets_the_traffic_percent(text_run: Path, tmp_path: Path) -> None:
    isvc = _isvc(text_run, tmp_path, Overrides(canary_percent=10))
    assert isvc["spec"]["predictor"]["canaryTrafficPercent"] == 10
    assert "canaryTrafficPercent: 10  # --canary-percent on the command line" in \
        (tmp_path / "inferenceservice.yaml").read_text()
