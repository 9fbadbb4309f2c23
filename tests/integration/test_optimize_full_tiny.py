"""The path `make demo` takes, whole, on a tiny model built in the test: `infertune optimize`
without --quick (each survivor timed against the baseline with each side in its own process,
a cold start, up to three survivors, the confirmation as served), then what a user does with
the run folder: `export` reads it, `infertune serve RUN` serves it and `loadtest`'s JSON API
drives it, and `ab report --server` reads a live stable/canary pair released from it.

One run (module-scoped) feeds every test here; its budget is the smallest that reaches the
cold start (270 s), and the run is slow (it times things), so it belongs to `make test`'s
serial stage.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml
from onnx_graphs import HIDDEN, WIDTH
from prom_counters import change, counters
from run_checks import assert_recommendation_follows_the_measurements
from serve_fault_procs import free_port, wait_until

from infertune.cli import main
from infertune.config import ServePolicy
from infertune.optimize.record import RunRecord
from infertune.optimize.search.timing import OWN_PROCESSES
from infertune.report.provenance import assert_all_figures_have_provenance

pytestmark = pytest.mark.slow

# the smallest budget that takes the demo's whole path: the profile measures the cold start
# only with more than 240 s left (optimize/stages/profile.py), so a 270 s run reaches it after setup
BUDGET = "270s"
INFERTUNE = str(Path(sys.executable).parent / "infertune")


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tensor MLP (TorchScript, inputs from an .npz): the fastest model whose full run still
    builds, screens, times and serves several variants, so a small budget reaches every
    stage (a tiny BERT's eager baseline spent a 270 s budget before the sweep on a busy
    2-core machine)."""
    import torch

    root = tmp_path_factory.mktemp("optimize_full")
    # a TorchScript baseline: its onnxruntime export beats eager at batch 1 on any x86 CPU, so
    # a survivor reaches the proper A/B (an .onnx baseline's variants all lost on a 2-core
    # AVX-512 EPYC, which left that stage unrun)
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(WIDTH, HIDDEN), torch.nn.ReLU(),
                                 torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(),
                                 torch.nn.Linear(HIDDEN, 8)).eval()
    model = root / "mlp.pt"
    torch.jit.save(torch.jit.trace(module, torch.zeros(1, WIDTH)), str(model))
    np.save(root / "mlp.example.npy", np.zeros(WIDTH, np.float32))
    rng = np.random.default_rng(3)
    inputs = rng.standard_normal((200, WIDTH)).astype(np.float32)
    data = root / "data.npz"
    np.savez(data, inputs=inputs)
    bodies = root / "bodies.jsonl"
    bodies.write_text("".join(json.dumps({"inputs": [row.tolist()]}) + "\n"
                              for row in inputs[:40]))
    scenario = root / "scenario.yaml"
    scenario.write_text(yaml.safe_dump({
        "model": {"name": "mlp", "family": "other", "task": "embedding", "framework": "pytorch"},
        "deployment": {"target": "container", "hardware": {"cpu": "test cpu"},
                       "cost_per_hour_usd": 0.1},
        "inputs": {"typical": {"batch_size": 1}},
        "slo": {"p95_ms": 20, "p99_ms": 40},
        "traffic": {"pattern": "bursty", "mean_rps": 10, "peak_rps": 30},
        "constraints": {"quality_floor": {"metric": "mean_cosine", "min": 0.99}}}))
    out = root / "run"
    rc = main(["optimize", str(model), "--scenario", str(scenario), "--data", str(data),
               "--budget", BUDGET, "--out", str(out)])
    assert rc == 0
    return {"root": root, "run": out, "bodies": bodies}


def test_a_full_run_takes_the_demo_path(full_run) -> None:
    out = full_run["run"]
    report = json.loads((out / "report.json").read_text())
    assert_all_figures_have_provenance(report)
    run = RunRecord.load(out)
    assert run.quick is False
    # the cold start was measured (a fresh process loads the model), not skipped
    assert run.profiling.profile is not None and run.profiling.profile.cold_start is not None
    # the survivors' proper A/B ran each side in its own process; at most three survivors
    proper = [c for c in run.screen.candidates if c.proper is not None]
    assert 1 <= len(proper) <= 3, [(c.variant_id, c.dropped) for c in run.screen.candidates]
    assert all(c.proper is not None and c.proper.where == OWN_PROCESSES for c in proper), [
        (c.variant_id, c.proper.where if c.proper else None) for c in proper]
    assert_recommendation_follows_the_measurements(out, report)
    # the policies were swept for the chosen variant and the report's SLO check names the
    # one served (on a busy 2-core machine the 270 s budget may end before the load tests
    # and the confirmation as served; run.json's skipped list then says so)
    assert run.sweep.sweep is not None
    assert report["slo_check"]["policy_id"] == report["serving"]["policy_id"]
    if not run.sweep.validations:
        assert any(s.what.startswith("load test of") and "time budget" in s.reason
                   for s in run.log.skipped), run.log.skipped
    # a real run's report.md keeps its summary within 700 words, counted as `wc -w` counts
    summary = (out / "report.md").read_text().split("<!-- end of summary -->")[0]
    assert len(summary.split()) <= 700


def test_export_reads_the_folder_optimize_wrote(full_run, tmp_path) -> None:
    out = full_run["run"]
    report = json.loads((out / "report.json").read_text())
    policy = ServePolicy(**report["serving"]["policy"])
    target = tmp_path / "triton"
    assert main(["export", str(out), "--to", "triton", "--out", str(target)]) == 0
    record = json.loads((target / "export.json").read_text())
    assert record["target"] == "triton"
    assert record["values"]["workers"]["value"] == policy.workers
    assert record["values"]["max_batch_size"]["value"] == policy.max_batch_size
    k8s = tmp_path / "k8s"
    assert main(["export", str(out), "--to", "kubernetes", "--out", str(k8s)]) == 0
    docs = [d for f in sorted(k8s.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text())]
    assert any(d and d.get("kind") == "Deployment" for d in docs)
    assert report["serving"]["variant_id"] in (k8s / "export.json").read_text()


@contextmanager
def _serving(*args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    port = free_port()
    log = open(os.devnull, "wb")  # noqa: SIM115 - closed below, after the process
    proc = subprocess.Popen([INFERTUNE, "serve", *args, "--port", str(port)], stdout=log,
                            stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited with {proc.returncode}")
        try:
            return httpx.get(url + "/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(ready, 120, interval=0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_loadtest_json_api_against_infertune_serve(full_run, tmp_path) -> None:
    result_file = tmp_path / "load.json"
    with _serving(str(full_run["run"])) as url:
        before = counters(url)
        rc = main(["loadtest", url + "/v1/predict", "--shape", "poisson", "--rate", "10",
                   "--duration", "3s", "--body-file", str(full_run["bodies"]), "--seed", "1",
                   "--json", str(result_file)])
        moved = change(before, counters(url))
    assert rc == 0
    saved = json.loads(result_file.read_text())
    assert saved["schema"] == "infertune.loadtest/v1"
    result = saved["result"]
    sent = result["sent"]
    assert sent >= 15  # about 10 req/s for 3 s, Poisson
    # every request the client sent is one the server counted, with the status it answered
    statuses = dict(result["status_counts"])
    assert sum(statuses.values()) == sent
    assert {k: v for k, v in moved.items() if k.startswith("infertune_requests_total")} == {
        f'infertune_requests_total{{status="{code}"}}': n for code, n in statuses.items()}
    assert statuses.get("200", 0) == result["ok"] == sent, statuses  # a tiny model, 10 req/s
    assert result["latency"]["count"] == sent
    assert result["server_timing_ms"], result  # the client read serve's Server-Timing header


def test_ab_report_reads_a_live_server(full_run, tmp_path, monkeypatch, capsys) -> None:
    out, registry = full_run["run"], tmp_path / "registry"
    report = json.loads((out / "report.json").read_text())
    stable = report["recommendation"]["variant_id"]
    other = next(r["variant_id"] for r in report["variants"]
                 if r["variant_id"] != stable and (out / "variants" / r["variant_id"]
                                                   / "manifest.json").is_file())
    for variant, name in ((stable, "a"), (other, "b")):
        assert main(["release", "add", str(out), "--variant", variant, "--name", name,
                     "--registry", str(registry)]) == 0
    monkeypatch.setenv("AB_TEST_KEY", "k3y")
    headers = {"X-API-Key": "k3y"}
    answered = {"a": 0, "b": 0}
    ones = {"a": 0, "b": 0}
    with _serving("--registry", str(registry), "--stable", "a", "--canary", "b",
                  "--canary-weight", "50", "--api-key-env", "AB_TEST_KEY") as url:
        for i in range(40):
            answer = httpx.post(url + "/v1/predict", json={"inputs": [[i / 40] * WIDTH]},
                                headers=headers, timeout=30)
            assert answer.status_code == 200, answer.text
            release = answer.headers["x-release"]
            value = 1 if (release == "b") == (i % 4 != 0) else 0  # b converts more often
            fed = httpx.post(url + "/v1/feedback", headers=headers, timeout=10, json={
                "request_id": answer.headers["x-request-id"], "metric": "conversion",
                "value": value})
            assert fed.status_code == 200 and fed.json()["release"] == release, fed.text
            answered[release] += 1
            ones[release] += value
        capsys.readouterr()
        rc = main(["ab", "report", "--server", url, "--metric", "conversion",
                   "--api-key-env", "AB_TEST_KEY", "--json"])
        printed = capsys.readouterr()
    assert rc == 0, printed.err
    assert answered["a"] > 0 and answered["b"] > 0, answered  # 50% canary over 40 requests
    result = json.loads(printed.out)
    # the arms are the releases' own feedback, counted exactly as it was sent
    got = {arm["release"]: (arm["n"], arm["ones"])
           for arm in (result["control"], result["treatment"])}
    assert got == {"a": (answered["a"], ones["a"]), "b": (answered["b"], ones["b"])}
    assert result["metric"] == "conversion"
    assert result["difference"] == pytest.approx(ones["b"] / answered["b"]
                                                 - ones["a"] / answered["a"])
