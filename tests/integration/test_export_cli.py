"""`infertune export RUN --to triton|kubernetes|kserve --out DIR` end to end on a tiny run
folder: the written values equal report.json's measured policy and scenario.yaml's SLO (read
back here, not taken from the fixture's constants), every file passes its validator, bad input
gets one line and exit 1 (or 2 for usage), a canary release from the registry gets its traffic
percent, and `infertune serve --alerts-out` writes the same rules as the Kubernetes export."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from export_checks import model_config_class, promtool_check
from export_run import make_run
from google.protobuf import text_format

import infertune.cli.api
from infertune.cli import main
from infertune.config import ServePolicy, load_scenario
from infertune.report.schema import Report
from infertune.rollout.release_registry import Registry
from infertune.serve.routing import RoutingEvent, RoutingState

K8S_VERSION = "1.33.0"
CORE = {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler"}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("export_cli"))


def _truth(run: Path) -> tuple[ServePolicy, dict[str, float]]:
    report = Report.load_json(run / "report.json")
    assert report.serving is not None
    return (ServePolicy.model_validate(report.serving.policy),
            load_scenario(run / "scenario.yaml").slo.targets())


def test_triton_export_equals_the_runs_policy(run: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "triton"
    assert main(["export", str(run), "--to", "triton", "--out", str(out)]) == 0
    assert "sources in" in capsys.readouterr().out
    policy, _ = _truth(run)
    record = json.loads((out / "export.json").read_text())
    assert record["target"] == "triton" and len(record["files"]) == 4
    configs = [text_format.Parse((out / f).read_text(), model_config_class()())
               for f in record["files"]]
    [onnx] = [c for c in configs if c.backend == "onnxruntime"]
    assert onnx.max_batch_size == policy.max_batch_size
    assert onnx.dynamic_batching.max_queue_delay_microseconds == policy.max_wait_ms * 1000
    assert list(onnx.dynamic_batching.preferred_batch_size) == [policy.max_batch_size]
    assert [g.count for g in onnx.instance_group] == [policy.workers]
    assert onnx.dynamic_batching.default_queue_policy.max_queue_size == policy.max_queue
    assert record["values"]["workers"]["value"] == policy.workers


def test_kubernetes_export_equals_the_runs_slo_and_validates(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "k8s"
    assert main(["export", str(run), "--to", "kubernetes", "--out", str(out), "--image",
                 "registry.example/infertune:1"]) == 0
    policy, targets = _truth(run)
    docs = {p.name: yaml.safe_load(p.read_text()) for p in out.glob("*.yaml")}
    checked = [kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
               for doc in docs.values() if doc["kind"] in CORE]
    assert checked == ["1.33"] * len(CORE)
    rules = {r["alert"]: r for g in docs["prometheusrule.yaml"]["spec"]["groups"]
             for r in g["rules"]}
    for name, ms in targets.items():
        assert rules[f"Infertune{name.upper()}OverSLO"]["expr"].endswith(f"> {ms / 1000:g}")
    assert promtool_check(out / "extras" / "alerts.yaml")
    served = yaml.safe_load(docs["configmap.yaml"]["data"]["serve.yaml"])
    assert ServePolicy.model_validate(served) == policy.model_copy(
        update={"timeout_ms": 10 * max(targets.values())})


def test_kserve_and_json_output(run: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "kserve"
    assert main(["export", str(run), "--to", "kserve", "--out", str(out), "--json",
                 "--canary-percent", "25"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((out / "export.json").read_text())
    assert printed["values"]["canary_percent"] == {"value": 25,
                                                   "source": "--canary-percent on the command line"}
    isvc = yaml.safe_load((out / "inferenceservice.yaml").read_text())
    assert isvc["spec"]["predictor"]["canaryTrafficPercent"] == 25


@pytest.mark.parametrize("args, code, message", [
    (["--to", "triton"], 1, "is not empty; pass --overwrite"),
    (["--to", "nginx"], 2, "nginx"),
])
def test_bad_input_is_one_line(run: Path, tmp_path: Path, capsys, args, code, message) -> None:
    out = tmp_path / "busy"
    out.mkdir()
    (out / "keep.txt").write_text("someone's file")
    assert main(["export", str(run), "--out", str(out), *args]) == code
    err = capsys.readouterr().err.strip()
    assert message in err
    if code == 1:
        assert len(err.splitlines()) == 1 and err.startswith("error: ")
    assert (out / "keep.txt").read_text() == "someone's file"


def test_a_folder_that_is_not_a_run(tmp_path: Path, capsys) -> None:
    assert main(["export", str(tmp_path), "--to", "kubernetes", "--out",
                 str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {tmp_path} has no report.json; pass the folder `infertune "
                   "optimize --out` wrote, or a release name with --registry DIR")


def test_serve_writes_the_same_rules_as_the_export(run: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    started = []
    monkeypatch.setattr(infertune.cli.api, "run_server",
                        lambda app, **kw: started.append(kw))  # no port is opened
    rules = tmp_path / "alerts.yaml"
    assert main(["serve", str(run), "--alerts-out", str(rules)]) == 0
    assert started == [{"host": "127.0.0.1", "port": 8000}]
    assert main(["export", str(run), "--to", "kubernetes", "--out", str(tmp_path / "k")]) == 0
    exported = yaml.safe_load((tmp_path / "k" / "prometheusrule.yaml").read_text())
    assert yaml.safe_load(rules.read_text())["groups"] == exported["spec"]["groups"]
    assert promtool_check(rules)


def test_a_canary_release_from_the_registry(run: Path, tmp_path: Path, capsys) -> None:
    registry = tmp_path / "registry"
    reg = Registry(registry)
    reg.add(run, name="stable-a")
    reg.add(run, name="canary-b")
    reg.record_event(RoutingEvent(time=1.0, kind="start", state=RoutingState(
        stable="stable-a", canary="canary-b", canary_weight=10.0)))
    reg.close()
    out = tmp_path / "kserve"
    assert main(["export", "canary-b", "--registry", str(registry), "--to", "kserve",
                 "--out", str(out)]) == 0
    isvc = yaml.safe_load((out / "inferenceservice.yaml").read_text())
    assert isvc["spec"]["predictor"]["canaryTrafficPercent"] == 10
    assert main(["export", "canary-b", "--registry", str(registry), "--variant", "x",
                 "--to", "kserve", "--out", str(tmp_path / "o")]) == 1
    assert capsys.readouterr().err.strip() == (
        "error: --variant picks a variant of a run; a release holds one variant already: "
        "drop --variant")
