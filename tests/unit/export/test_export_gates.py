"""`infertune export --to argo-rollouts | flagger`: the AnalysisTemplate and the Flagger Canary
checked field by field (no CRD schema for either ships on PyPI; the field names are those of
Argo Rollouts' v1alpha1 AnalysisTemplateSpec/Metric/WebMetric and Flagger's v1beta1
CanarySpec/CanaryAnalysis/CanaryWebhook), the endpoint's Deployment and Service validated as
core objects (kubernetes-validate), and the URLs they write answered by the analysis endpoint
with the verdict `infertune canary --judge-once` gives on the same Prometheus counts."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import kubernetes_validate
import pytest
import yaml
from starlette.testclient import TestClient

from infertune.cli import main
from infertune.export.argo import write_argo
from infertune.export.deploy_plan import plan
from infertune.export.flagger import write_flagger
from infertune.export.source import read_source
from infertune.rollout.analysis import ArmPrometheus, Arms, analysis_app, pod_gates

K8S_VERSION = "1.33.0"
TEMPLATE_SPEC = {"args", "metrics", "dryRun", "measurementRetention"}
METRIC_FIELDS = {"name", "interval", "initialDelay", "count", "successCondition",
                 "failureCondition", "failureLimit", "inconclusiveLimit",
                 "consecutiveErrorLimit", "provider", "consecutiveSuccessLimit"}
WEB_FIELDS = {"method", "url", "headers", "body", "jsonBody", "timeoutSeconds", "jsonPath",
              "insecure", "authentication"}
CANARY_SPEC = {"provider", "targetRef", "autoscalerRef", "ingressRef", "routeRef",
               "upstreamRef", "service", "analysis", "progressDeadlineSeconds", "skipAnalysis",
               "revertOnDeletion", "suspend"}
ANALYSIS_FIELDS = {"interval", "iterations", "mirror", "mirrorWeight", "maxWeight",
                   "stepWeight", "stepWeights", "stepWeightPromotion", "threshold",
                   "primaryReadyThreshold", "canaryReadyThreshold", "alerts", "metrics",
                   "webhooks", "match", "sessionAffinity"}
WEBHOOK_FIELDS = {"name", "type", "url", "timeout", "metadata", "muteAlert", "retries",
                  "disableTLS"}
WEBHOOK_TYPES = {"confirm-rollout", "pre-rollout", "rollout", "confirm-traffic-increase",
                 "confirm-promotion", "post-rollout", "rollback", "event"}


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _prometheus(series: dict[str, dict[str, list[tuple[dict[str, str], float]]]]
                ) -> httpx.Client:
    """A canned Prometheus: ``series[arm value][metric name]`` -> rows, found by the query's
    metric name and selector value."""
    def handler(request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        rows: list[tuple[dict[str, str], float]] = []
        for value, by_name in series.items():
            if f'="{value}"' in query:
                name = query.split("(", 2)[-1].split("{", 1)[0]
                rows = by_name.get(name, [])
        result = [{"metric": m, "value": [0, str(v)]} for m, v in rows]
        return httpx.Response(200, json={"status": "success",
                                         "data": {"resultType": "vector", "result": result}})

    return httpx.Client(base_url="http://prom", transport=httpx.MockTransport(handler))


def _arm(requests: int, errors: int, fast: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Cumulative series of one arm: ``fast`` of ``requests`` within 10 ms, the rest 50 ms."""
    ok = requests - errors
    return {"infertune_requests_total": [({"status": "200"}, ok), ({"status": "500"}, errors)],
            "infertune_request_seconds_bucket": [({"le": "0.01"}, fast), ({"le": "0.05"},
                                                                          requests),
                                                 ({"le": "+Inf"}, requests)]}


COUNTS = {"abc": _arm(400, 60, 380), "def": _arm(4000, 4, 3800)}  # canary abc: 15% errors


def test_argo_template_and_endpoint_check_field_by_field(text_run: Path, tmp_path: Path) -> None:
    files = write_argo(plan(read_source(text_run)), tmp_path, image="reg.example/infertune:1",
                       prometheus_url="http://prom.monitoring.svc:9090", namespace="ml")
    assert [f.name for f in files] == ["analysis-endpoint.yaml", "analysistemplate.yaml",
                                       "rollout-strategy-snippet.yaml"]
    [template] = _docs(tmp_path / "analysistemplate.yaml")
    assert (template["apiVersion"], template["kind"]) == ("argoproj.io/v1alpha1",
                                                          "AnalysisTemplate")
    spec = template["spec"]
    assert set(spec) <= TEMPLATE_SPEC
    declared = {a["name"] for a in spec["args"]}
    [metric] = spec["metrics"]
    assert set(metric) <= METRIC_FIELDS and set(metric["provider"]) == {"web"}
    web = metric["provider"]["web"]
    assert set(web) <= WEB_FIELDS and web["jsonPath"] == "{$}"
    # every {{args.X}} the URL uses is declared, and the snippet fills each from a hash
    used = {part.split("}}")[0] for part in web["url"].split("{{args.")[1:]}
    assert used == declared == {"canary-hash", "stable-hash"}
    snippet = _docs(tmp_path / "extras" / "rollout-strategy-snippet.yaml")[0]
    args = snippet["strategy"]["canary"]["analysis"]["args"]
    assert {a["name"]: a["valueFrom"]["podTemplateHashValue"] for a in args} == {
        "canary-hash": "Latest", "stable-hash": "Stable"}
    assert metric["failureCondition"] == 'result.verdict == "fail"'
    assert metric["failureLimit"] == 0
    assert "# the gates fail only when sure" in (tmp_path / "analysistemplate.yaml").read_text()
    for doc in _docs(tmp_path / "analysis-endpoint.yaml"):
        assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == "1.33"

    # the URL Argo would call, hashes filled in, answered by the endpoint
    url = web["url"].replace("{{args.canary-hash}}", "abc").replace("{{args.stable-hash}}",
                                                                      "def")
    assert url.startswith("http://") and ".ml.svc:8080/v1/analysis?" in url
    params = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
    judged = _endpoint().get("/v1/analysis", params=params).json()
    assert judged["verdict"] == "fail" and "errors" in judged["reason"]
    assert params["label"] == "rollouts_pod_template_hash"


def _endpoint() -> TestClient:
    prom = _prometheus(COUNTS)
    app = analysis_app(lambda arms: ArmPrometheus(prom, arms), pod_gates(0.05, 0.05))
    return TestClient(app)


def test_flagger_canary_and_webhooks_check_field_by_field(text_run: Path,
                                                         tmp_path: Path) -> None:
    write_flagger(plan(read_source(text_run)), tmp_path, image="reg.example/infertune:1",
                  prometheus_url="http://prom:9090")
    [canary] = _docs(tmp_path / "canary.yaml")
    assert (canary["apiVersion"], canary["kind"]) == ("flagger.app/v1beta1", "Canary")
    spec = canary["spec"]
    assert set(spec) <= CANARY_SPEC and set(spec["analysis"]) <= ANALYSIS_FIELDS
    assert spec["targetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                 "name": canary["metadata"]["name"]}
    hooks = spec["analysis"]["webhooks"]
    assert [h["type"] for h in hooks] == ["rollout", "confirm-promotion"]
    for hook in hooks:
        assert set(hook) <= WEBHOOK_FIELDS and hook["type"] in WEBHOOK_TYPES
        assert all(isinstance(v, str) for v in hook["metadata"].values())
    name = canary["metadata"]["name"]
    assert hooks[0]["metadata"] == {"label": "app_kubernetes_io_name", "canary": name,
                                    "stable": f"{name}-primary"}
    # Flagger's payload, arms from the hook's metadata: a failing canary fails both hooks
    body = {"name": name, "namespace": "default", "phase": "Progressing",
            "metadata": {"label": "app", "canary": "abc", "stable": "def"}}
    client = _endpoint()
    check = client.post("/v1/flagger/check", json=body)
    assert check.status_code == 409 and check.json()["verdict"] == "fail"
    assert client.post("/v1/flagger/promote", json=body).status_code == 409
    bad = client.post("/v1/flagger/check", content=b"{}")
    assert bad.status_code == 422 and "flagger webhook body" in bad.json()["error"]


def test_endpoint_verdict_equals_judge_once_and_wait_is_neither(monkeypatch: pytest.MonkeyPatch,
                                                                capsys, tmp_path: Path) -> None:
    client = _endpoint()
    params = {"label": "rollouts_pod_template_hash", "canary": "abc", "stable": "def"}
    served = client.get("/v1/analysis", params=params).json()
    prom = _prometheus(COUNTS)
    real_client = httpx.Client

    def canned(*args: object, **kwargs: object) -> httpx.Client:
        return prom

    monkeypatch.setattr(httpx, "Client", canned)
    rc = main(["canary", "--judge-once", "--prometheus", "http://prom",
               "--arm-label", "rollouts_pod_template_hash", "--canary-value", "abc",
               "--stable-value", "def", "--json", str(tmp_path / "v.json")])
    monkeypatch.setattr(httpx, "Client", real_client)
    assert rc == 1  # a failing canary: exit 1, like a rollback
    assert json.loads((tmp_path / "v.json").read_text()) == served
    errors = next(g for g in served["gates"] if g["gate"] == "errors")
    assert errors["verdict"] == "fail" and errors["interval"][0] > 0.01
    assert (errors["n_canary"], errors["n_stable"]) == (400, 4000)
    capsys.readouterr()

    # too few canary requests to pass, none worse: wait -> Argo success, Flagger holds
    few = {"abc": _arm(20, 0, 19), "def": _arm(4000, 4, 3800)}
    app = analysis_app(lambda arms: ArmPrometheus(_prometheus(few), arms),
                       pod_gates(0.05, 0.05))
    waiting = TestClient(app)
    assert waiting.get("/v1/analysis", params=params).json()["verdict"] == "wait"
    hook = {"name": "x", "metadata": {"label": "app", "canary": "abc", "stable": "def"}}
    assert waiting.post("/v1/flagger/check", json=hook).status_code == 200
    assert waiting.post("/v1/flagger/promote", json=hook).status_code == 409
    bad = waiting.get("/v1/analysis", params={**params, "label": "bad label"})
    assert bad.status_code == 422 and "not a Prometheus label name" in bad.json()["error"]
    with pytest.raises(Exception, match="both 'abc'"):
        Arms("app", "abc", "abc")


def test_export_command_writes_both(text_run: Path, tmp_path: Path, capsys) -> None:
    for target, name in (("argo-rollouts", "analysistemplate.yaml"), ("flagger", "canary.yaml")):
        out = tmp_path / target
        assert main(["export", str(text_run), "--to", target, "--out", str(out),
                     "--namespace", "ml", "--json"]) == 0
        record = json.loads(capsys.readouterr().out)
        assert name in record["files"] and (out / name).is_file()
        assert ".ml.svc:8080/v1/" in (out / name).read_text()
