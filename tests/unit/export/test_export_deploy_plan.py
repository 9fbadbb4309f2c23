"""Reading a run folder or a registry release and deriving the plan: the numbers, their sources, and
the one-line refusals of bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from export_run import GOODPUT_RPS, POLICY, SERVICE_P50_MS, make_run, report

from infertune.config import CLIENT_DEADLINE_FACTOR, ServePolicy
from infertune.errors import ConfigError, ModelLoadError
from infertune.export.deploy_plan import ExportRecord, Overrides, k8s_name, plan, summary
from infertune.export.source import read_release, read_source
from infertune.report.schema import Recommendation
from infertune.rollout.release_registry import Registry
from infertune.serve.routing import RoutingEvent, RoutingState

VID = "ort_int8_dynamic_per_channel"


@pytest.fixture
def run(tmp_path: Path, text_run: Path) -> Path:
    """A private copy of the session's text run, free to break."""
    return Path(shutil.copytree(text_run, tmp_path / "run"))


def test_the_plan_takes_every_number_from_the_run(text_run: Path) -> None:
    p = plan(read_source(text_run))
    assert p.name == "infertune-ort-int8-dynamic-per-channel"
    assert (p.max_batch_size.value, p.max_wait_us.value, p.workers.value, p.max_queue.value) \
        == (POLICY.max_batch_size, 3000, POLICY.workers, POLICY.max_queue)
    assert "report.json serving.policy (policy p3" in p.max_batch_size.source
    deadline_ms = CLIENT_DEADLINE_FACTOR * 100.0  # the client deadline: 10 x the p99 target
    assert p.deadline_ms is not None and p.deadline_ms.value == deadline_ms
    assert "slo.p99_ms" in p.deadline_ms.source
    assert p.queue_timeout_us is not None
    assert p.queue_timeout_us.value == round((deadline_ms - SERVICE_P50_MS) * 1000)
    assert (p.min_replicas.value, p.max_replicas.value) == (2, 4)
    assert p.concurrency_target.value == 9  # ceil(180 req/s x 0.050 s)
    assert p.cpus.value == 4.0 and "hardware.json" in p.cpus.source
    assert p.canary_percent is None
    record = summary(p, "kubernetes", ["deployment.yaml"])
    assert record.values["max_batch_size"].value == 16
    assert record.values["max_batch_size"].source == p.max_batch_size.source
    assert ExportRecord.from_json(record.to_json()) == record  # export.json round-trips
    assert json.loads(record.to_json())["schema"] == "infertune.export/v1"


def test_overrides_win_and_say_so(text_run: Path) -> None:
    p = plan(read_source(text_run), Overrides(name="My Svc", cpus=1.5, min_replicas=3,
                                              max_replicas=9, canary_percent=10))
    assert p.name == "my-svc"
    assert (p.cpus.value, p.min_replicas.value, p.max_replicas.value) == (1.5, 3, 9)
    assert p.canary_percent is not None and p.canary_percent.value == 10
    assert p.cpus.source == "--cpus on the command line"
    with pytest.raises(ConfigError, match="max replicas 1 .* is below min replicas 3"):
        plan(read_source(text_run), Overrides(min_replicas=3, max_replicas=1))
    with pytest.raises(ConfigError, match="--canary-percent 150 is not a percentage"):
        plan(read_source(text_run), Overrides(canary_percent=150))
    with pytest.raises(ConfigError, match="pass --name"):
        k8s_name("___")


def test_without_measured_capacity_the_fallbacks_are_labelled(run: Path) -> None:
    data = json.loads((run / "report.json").read_text())
    data["policies"] = []  # no measured goodput
    (run / "report.json").write_text(json.dumps(data))
    p = plan(read_source(run))
    assert (p.min_replicas.value, p.max_replicas.value) == (1, 1)
    assert p.min_replicas.source.startswith("no measured goodput")
    assert p.queue_target.value == POLICY.max_batch_size * POLICY.workers
    assert p.queue_timeout_us is not None
    assert p.queue_timeout_us.value == round(CLIENT_DEADLINE_FACTOR * 100.0 * 1000)
    assert "no measured service time" in p.queue_timeout_us.source
    assert p.alerts.queue_depth.value == POLICY.max_queue // 2


def test_a_goodput_of_zero_is_no_capacity(run: Path) -> None:
    data = json.loads((run / "report.json").read_text())
    data["policies"][0]["goodput"]["value"] = 0.0  # no rate kept the SLO
    (run / "report.json").write_text(json.dumps(data))
    p = plan(read_source(run))
    assert (p.min_replicas.value, p.max_replicas.value) == (1, 1)
    assert p.queue_target.value == POLICY.max_batch_size * POLICY.workers


def test_a_registry_release_is_read_with_its_canary_weight(run: Path, tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    reg = Registry(registry)
    reg.add(run, name="a")
    reg.add(run, name="b")
    reg.record_event(RoutingEvent(time=1.0, kind="start", state=RoutingState(
        stable="a", canary="b", canary_weight=5.0)))
    reg.close()
    src = read_release(registry, "b")
    assert (src.kind, src.name, src.manifest.id) == ("release", "b", VID)
    assert src.variant_dir.parent == registry / "artifacts"
    p = plan(src)
    assert p.canary_percent is not None and p.canary_percent.value == 5
    assert "routing event" in p.canary_percent.source
    # the same measured policy, capacity and SLO as the run it was added from
    from_run = plan(read_source(run))
    assert (p.max_batch_size.value, p.queue_target.value, p.max_replicas.value) == (
        from_run.max_batch_size.value, from_run.queue_target.value, from_run.max_replicas.value)
    assert plan(read_release(registry, "a")).canary_percent is None  # the stable one
    with pytest.raises(ConfigError, match="no release named 'c'"):
        read_release(registry, "c")
    with pytest.raises(ConfigError, match="is not a release registry"):
        read_release(tmp_path, "b")


def test_a_policy_measured_for_another_variant_is_not_reused(run: Path) -> None:
    shutil.copytree(run / "variants" / VID, run / "variants" / "other")
    src = read_source(run, "other")
    assert src.policy == ServePolicy()
    assert src.policy_origin.startswith("ServePolicy defaults")


@pytest.mark.parametrize("breakage, message", [
    ("no_report", "has no report.json; pass the folder"),
    ("baseline", "recommends keeping the baseline model"),
    ("no_variant", "manifest.json not found; pick one of"),
    ("no_scenario", "scenario.yaml not found"),
    ("no_hardware", "no hardware.json, whose cores .* pass --cpus N"),
    ("bad_report", "not valid JSON"),
    ("bad_policy", "serving.policy is not a valid ServePolicy"),
    ("slow_variant", "shorter than the measured service time"),
])
def test_bad_runs_are_refused_in_one_line(run: Path, breakage: str, message: str) -> None:
    rep = run / "report.json"
    if breakage == "no_report":
        rep.unlink()
    elif breakage == "baseline":
        r = report(VID)
        r.recommendation = Recommendation(variant_id=None)
        r.save_json(rep)
    elif breakage == "no_variant":
        shutil.rmtree(run / "variants" / VID)
    elif breakage == "no_scenario":
        (run / "scenario.yaml").unlink()
    elif breakage == "no_hardware":
        (run / "hardware.json").unlink()
    elif breakage == "bad_report":
        rep.write_text("{not json")
    elif breakage == "bad_policy":
        data = json.loads(rep.read_text())
        data["serving"]["policy"]["max_batch_size"] = 0
        rep.write_text(json.dumps(data))
    elif breakage == "slow_variant":
        (run / "scenario.yaml").write_text(yaml.safe_dump({
            # a deadline (10 x the target) of half the measured service time
            "slo": {"p99_ms": SERVICE_P50_MS / (2 * CLIENT_DEADLINE_FACTOR)},
                                                           "traffic": {"mean_rps": 10}}))
    with pytest.raises(ConfigError, match=message) as info:
        plan(read_source(run))
    assert "\n" not in str(info.value)


def test_a_tampered_variant_is_refused(run: Path) -> None:
    (run / "variants" / VID / "model.onnx").write_bytes(b"changed")
    with pytest.raises(ModelLoadError, match="does not match its SHA-256"):
        read_source(run)


def test_a_missing_folder_names_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a folder; pass a run folder"):
        read_source(tmp_path / "nope")


def test_goodput_per_pod_sets_the_replicas(tmp_path: Path) -> None:
    run = make_run(tmp_path, kind="tensor", vid="ort_fp32")
    p = plan(read_source(run))
    assert p.max_replicas.value == -(-700 // int(GOODPUT_RPS))  # ceil(700 / 180) = 4
