"""`infertune optimize` on a user's own tensor model (an .onnx or TorchScript file, inputs from
an .npz): the onnxruntime variants are built, judged against the scenario's floor for the
scenario's task, and report.json names a variant that loads (or keeps the baseline, saying
why); a floor that does not fit the task fails at once."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from onnx_graphs import WIDTH, make_mlp
from run_checks import assert_judged_or_stopped, assert_recommendation_follows_the_measurements

from infertune.cli import main
from infertune.models import load
from infertune.report.provenance import assert_all_figures_have_provenance

pytestmark = pytest.mark.slow  # whole optimize runs, under 10 s each here


def _setup(root: Path, task: str, floor: dict,
           pattern: str = "steady") -> tuple[Path, Path, Path]:
    model = make_mlp(root / "mlp.onnx")
    data = root / "data.npz"
    rng = np.random.default_rng(3)
    np.savez(data, inputs=rng.standard_normal((200, WIDTH)).astype(np.float32))
    scenario = root / f"{task}.yaml"
    scenario.write_text(yaml.safe_dump({
        "model": {"name": "mlp", "family": "other", "task": task, "framework": "onnx"},
        "deployment": {"target": "container", "hardware": {"cpu": "test cpu"},
                       "cost_per_hour_usd": 0.1},
        "inputs": {"typical": {"batch_size": 1}},
        "slo": {"p95_ms": 5, "p99_ms": 10},
        "traffic": {"pattern": pattern, "mean_rps": 50, "peak_rps": 100},
        "constraints": {"quality_floor": floor}}))
    return model, data, scenario


def test_optimize_an_onnx_tensor_model(tmp_path) -> None:
    model, data, scenario = _setup(tmp_path, "embedding", {"metric": "mean_cosine", "min": 0.99})
    out = tmp_path / "run"
    rc = main(["optimize", str(model), "--scenario", str(scenario), "--data", str(data),
               "--quick", "--budget", "45s", "--out", str(out)])
    assert rc == 0
    assert_the_run_held_its_budget(out)
    report = json.loads((out / "report.json").read_text())
    assert_all_figures_have_provenance(report)
    rows = {r["variant_id"]: r for r in report["variants"]}
    assert "ort_fp32" in rows  # the copy of the user's file stands for the baseline
    assert_int8_passed_or_stopped(out, report)
    # the baseline session already runs every onnxruntime graph optimisation: not an option
    assert "ort-graph-optimisation" not in {o["id"] for o in report["options"]}
    vid = assert_recommendation_follows_the_measurements(out, report)
    assert vid == report["recommendation"]["variant_id"]
    adapter = load(out / "variants" / vid)
    assert adapter.info.kind == "tensor" and adapter.info.task == "embedding"
    assert np.asarray(adapter.predict([np.zeros(WIDTH, np.float32)])[0]).shape == (8,)


def assert_the_run_held_its_budget(out: Path, budget_s: float = 45.0) -> None:
    """--budget is the time for the whole run: its stages together stay within it (the
    goodput search of the serving-policy stage once simulated millions of arrivals at these
    MLPs' capacity bound and took 101-129 s of a 45 s budget)."""
    stages = json.loads((out / "run.json").read_text())["log"]["stage_seconds"]
    assert sum(stages.values()) <= budget_s, stages


def assert_int8_passed_or_stopped(out: Path, report: dict) -> None:
    """The per-channel INT8 variant was built and screened: judged and passing, or stopped
    as a clear loser on speed (these tiny MLPs), with run.json and the report agreeing."""
    assert_judged_or_stopped(out, report, "ort_int8_dynamic_per_channel")


def test_a_spiky_scenario_holds_the_budget_by_leaving_out_what_it_cannot_afford(
        tmp_path) -> None:
    # a spiky window must hold its on/off cycles at any rate, so the goodput search at the
    # MLP's capacity bound (~200,000 req/s) would simulate millions of arrivals: this run took
    # 70.6 s of its 45 s budget in the serving-policy stage before optimize checked the budget
    # before each search
    model, data, scenario = _setup(tmp_path, "embedding",
                                   {"metric": "mean_cosine", "min": 0.99}, pattern="spiky")
    out = tmp_path / "run"
    rc = main(["optimize", str(model), "--scenario", str(scenario), "--data", str(data),
               "--quick", "--budget", "45s", "--out", str(out)])
    assert rc == 0
    assert_the_run_held_its_budget(out)
    run = json.loads((out / "run.json").read_text())
    left_out = {s["what"].rsplit(" ", 1)[1] for s in run["log"]["skipped"]
                if s["what"].startswith("goodput search of ")}
    for r in run["sweep"]["sweep"]["ranked"]:  # each leader searched, or said not to be
        assert (r.get("goodput_rps") is None) == (r["policy_id"] in left_out), r["policy_id"]
    report = json.loads((out / "report.json").read_text())
    assert_all_figures_have_provenance(report)


def test_optimize_a_torchscript_model(tmp_path) -> None:
    import torch

    _, data, scenario = _setup(tmp_path, "embedding", {"metric": "mean_cosine", "min": 0.99})
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(WIDTH, 256), torch.nn.ReLU(),
                                 torch.nn.Linear(256, 8)).eval()
    model = tmp_path / "mlp.pt"
    torch.jit.save(torch.jit.trace(module, torch.zeros(1, WIDTH)), str(model))
    np.save(tmp_path / "mlp.example.npy", np.zeros(WIDTH, np.float32))
    out = tmp_path / "run"
    rc = main(["optimize", str(model), "--scenario", str(scenario), "--data", str(data),
               "--quick", "--budget", "45s", "--out", str(out)])
    assert rc == 0
    assert_the_run_held_its_budget(out)
    report = json.loads((out / "report.json").read_text())
    assert_int8_passed_or_stopped(out, report)  # built from the TorchScript model's export
    rec = report["recommendation"]
    vid = assert_recommendation_follows_the_measurements(out, report)
    if rec["title"] != "Keep the baseline model":  # a variant: one of the onnxruntime exports
        assert load(out / "variants" / vid).info.runtime == "onnxruntime"


@pytest.mark.timing_free  # refused in setup, before anything is timed or the budget starts
def test_a_floor_that_does_not_fit_the_task_fails_before_the_run(tmp_path, capsys) -> None:
    model, data, scenario = _setup(tmp_path, "regression",
                                   {"metric": "mean_cosine", "min": 0.99})
    out = tmp_path / "run"
    rc = main(["optimize", str(model), "--scenario", str(scenario), "--data", str(data),
               "--quick", "--budget", "45s", "--out", str(out)])
    assert rc == 1
    err = capsys.readouterr().err.strip()
    assert err.endswith("mean_cosine does not apply to 'regression' models; use one of "
                        "max_abs_diff, max_rel_diff")
    assert len(err.splitlines()) == 1
    assert not out.exists()
