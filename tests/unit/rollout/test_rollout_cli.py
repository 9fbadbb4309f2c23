"""The rollout commands: release add/list/show/diff/prune, ab report from the registry,
serve --stable building the router, and the one-line errors for bad input."""

from __future__ import annotations

import json

import pytest
from rollout_variants import mlp_run

import infertune.cli.release
from infertune.cli import main
from infertune.rollout.feedback import FeedbackStore
from infertune.rollout.release_registry import Registry
from infertune.serve.routing import FeedbackItem, Router


@pytest.fixture
def runs(tmp_path):
    return mlp_run(tmp_path / "run-a"), mlp_run(tmp_path / "run-b", noise=1.0)


def test_release_commands(tmp_path, runs, capsys) -> None:
    reg = str(tmp_path / "reg")
    assert main(["release", "add", str(runs[0]), "--name", "a", "--registry", reg]) == 0
    assert "release a: variant ort_fp32 (onnxruntime, fp32)" in capsys.readouterr().out
    assert main(["release", "add", str(runs[1]), "--name", "b", "--registry", reg,
                 "--json"]) == 0
    added = json.loads(capsys.readouterr().out)
    assert added["record"]["name"] == "b" and added["status"] == "registered"
    assert main(["release", "list", "--registry", reg, "--json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)] == ["a", "b"]
    assert main(["release", "diff", "a", "b", "--registry", reg]) == 0
    assert "digest:" in capsys.readouterr().out
    assert main(["release", "show", "a", "--registry", reg]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["record"]["policy"]["max_batch_size"] == 8
    assert [e["kind"] for e in shown["events"]] == ["add"]
    Registry(tmp_path / "reg").set_status("b", "rolled_back", "test")
    assert main(["release", "prune", "--registry", reg]) == 0
    assert "pruned 1 release(s): b" in capsys.readouterr().out


def test_bad_input_is_one_line_with_exit_1(tmp_path, runs, capsys) -> None:
    reg = str(tmp_path / "reg")
    assert main(["release", "add", str(tmp_path), "--name", "x", "--registry", reg]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "neither a run folder" in err and err.count("\n") == 1
    assert main(["release", "show", "nope", "--registry", reg]) == 1
    assert "no release named 'nope'" in capsys.readouterr().err
    assert main(["canary", "--server", "http://127.0.0.1:9", "--release", "x",
                 "--steps", "5,x"]) == 1
    assert "--steps '5,x'" in capsys.readouterr().err
    assert main(["ab", "report", "--registry", reg]) == 1
    assert "no feedback recorded yet" in capsys.readouterr().err
    assert main(["ab", "report"]) == 1
    assert "exactly one of --server URL, --registry DIR or --redis URL" in capsys.readouterr().err
    assert main(["rollback", "--server", "http://127.0.0.1:9", "--api-key-env", "NOPE_X"]) == 1
    assert "NOPE_X" in capsys.readouterr().err


def test_ab_report_from_the_registry(tmp_path, capsys) -> None:
    registry = Registry(tmp_path / "reg")
    store = FeedbackStore(registry)
    for i in range(400):
        store.record_feedback(FeedbackItem(f"a{i}", "a", None, "conversion", int(i % 10 == 0),
                                           0.0))
        store.record_feedback(FeedbackItem(f"b{i}", "b", None, "conversion", int(i % 4 == 0),
                                           0.0))
    assert main(["ab", "report", "--registry", str(tmp_path / "reg"), "--control", "a",
                 "--treatment", "b", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["control"]["rate"] == pytest.approx(0.1)
    assert report["treatment"]["rate"] == pytest.approx(0.25)
    assert report["difference"] == pytest.approx(0.15)
    lo, hi = report["difference_interval"]
    assert 0 < lo < 0.15 < hi
    assert report["decision"] == "treatment better"
    assert report["needed_per_arm"] > 1000  # a 1-point effect at a 10% base rate
    assert main(["ab", "report", "--registry", str(tmp_path / "reg"), "--control", "a",
                 "--treatment", "z"]) == 1
    assert "no 'conversion' feedback for release 'z'" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timing_free
def test_serve_stable_builds_the_router(tmp_path, runs, monkeypatch, capsys) -> None:
    reg = str(tmp_path / "reg")
    for name, run in zip("ab", runs, strict=True):
        assert main(["release", "add", str(run), "--name", name, "--registry", reg]) == 0
    served = []
    monkeypatch.setattr(infertune.cli.release, "run_server",
                        lambda app, host, port: served.append((app, host, port)))
    monkeypatch.setenv("ROLLOUT_TEST_KEY", "k")
    assert main(["serve", "--registry", reg, "--stable", "a", "--canary", "b",
                 "--canary-weight", "5", "--api-key-env", "ROLLOUT_TEST_KEY",
                 "--max-batch-size", "4"]) == 0
    (router, host, port), = served
    assert isinstance(router, Router) and (host, port) == ("127.0.0.1", 8000)
    assert router.state.canary == "b" and router.state.canary_weight == 5
    assert router.api_key == "k"
    assert "serving stable a, canary b at 5%" in capsys.readouterr().err
    assert main(["serve", "--registry", reg, "--stable", "zz"]) == 1
    assert "no release named 'zz'" in capsys.readouterr().err
