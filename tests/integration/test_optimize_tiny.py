"""`infertune optimize` end to end on a tiny BERT built in the test (random weights, 2 layers),
with --quick: the run directory, report.json's contract with serve, provenance of every number,
and the three edge cases (SLO already met, no variant meets the floor, budget too small)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from run_checks import assert_judged_or_stopped  # tests/helpers

from infertune.cli import main
from infertune.config import ServePolicy
from infertune.report.provenance import assert_all_figures_have_provenance
from infertune.report.schema import Report

pytestmark = pytest.mark.slow  # whole optimize runs, 15-30 s each

WORDS = ("the a is was fast slow model query answer user password reset report revenue grew "
         "costs stayed flat inference matters when users wait for every how do i my quarterly "
         "shows eight percent while").split()


def _tiny_bert(folder: Path, hidden: int = 32, layers: int = 2) -> Path:
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(str(folder))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    BertModel(config).eval().save_pretrained(str(folder), safe_serialization=True)
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("optimize_tiny")
    model = _tiny_bert(root / "model")
    rng = __import__("random").Random(0)
    lines = []
    for i in range(60):
        n = rng.randint(2, 14)
        text = " ".join(rng.choice(WORDS) for _ in range(n))
        lines.append(json.dumps({"input": text if i % 10 else "how do i reset my password"}))
    data = root / "data.jsonl"
    data.write_text("\n".join(lines) + "\n")
    small = _tiny_bert(root / "small", hidden=16, layers=1)
    return {"root": root, "model": model, "data": data, "small": small}


def _scenario(root: Path, name: str, **changes: object) -> Path:
    base = {
        "model": {"name": "tiny-bert", "family": "transformer-encoder", "task": "embedding",
                  "framework": "pytorch"},
        "deployment": {"target": "container", "hardware": {"cpu": "test cpu"},
                       "cost_per_hour_usd": 0.1},
        "inputs": {"typical": {"batch_size": 1, "seq_len": 16}},
        "slo": {"p95_ms": 5, "p99_ms": 10},
        "traffic": {"pattern": "bursty", "mean_rps": 20, "peak_rps": 60},
        "constraints": {"quality_floor": {"metric": "mean_cosine", "min": 0.99}},
    }
    base.update(changes)
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(base))
    return path


def _run(tiny: dict[str, Path], scenario: Path, out: Path, budget: str = "60s",
         *extra: str) -> int:
    return main(["optimize", str(tiny["model"]), "--scenario", str(scenario), "--data",
                 str(tiny["data"]), "--quick", "--budget", budget, "--out", str(out), *extra])


def test_quick_run_writes_the_run_directory_and_the_serve_contract(tiny, capsys) -> None:
    out = tiny["root"] / "run"
    assert _run(tiny, _scenario(tiny["root"], "plain"), out, "60s", "--candidate",
                str(tiny["small"])) == 0
    printed = capsys.readouterr().out
    assert str((out / "report.html").resolve()) in printed.replace("\n", "")
    for name in ("scenario.yaml", "hardware.json", "profile.json", "report.json", "report.md",
                 "report.html"):
        assert (out / name).is_file(), name
    report = json.loads((out / "report.json").read_text())
    assert report["schema"] == "infertune.report/v1" and report["kind"] == "run"
    Report.from_dict(report)  # renderers and `infertune report` can read it back
    assert_all_figures_have_provenance(report)
    vid = report["recommendation"]["variant_id"]
    folder = out / "variants" / vid
    assert (folder / "manifest.json").is_file()
    policy = ServePolicy(**report["serving"]["policy"])  # what serve reads
    assert policy.max_batch_size >= 1
    # every screened variant left its measurements beside its manifest
    screened = [r["variant_id"] for r in report["variants"][1:]
                if not r["variant_id"].startswith("candidate-")]
    assert screened
    for v in screened:
        assert (out / "variants" / v / "latency.json").is_file()
        # judged and passing, or stopped as a clear loser on speed, as run.json says
        assert assert_judged_or_stopped(out, report, v) in ("judged", "stopped")
    assert report["policies"] and any(p["goodput"] for p in report["policies"])
    assert any(o["source"] == "estimate" for o in report["options"])
    assert any(o["source"] == "measured" for o in report["options"])
    # the smaller candidate was timed; an embedding cascade is refused with the reason
    assert any(r["variant_id"] == "candidate-small" for r in report["variants"])
    assert any("cascade" in n and "different vector spaces" in n for n in report["notes"])
    # serve = report: `infertune serve <run>` runs exactly the recommended configuration
    served = _served_config(out)
    assert served["model"]["id"] == vid
    assert served["policy"] == ServePolicy(**report["serving"]["policy"]).model_dump(mode="json")
    assert served["policy"]["timeout_ms"] == 100.0  # 10 x the SLO's loosest target, stated


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _served_config(run: Path, start_timeout_s: float = 120.0) -> dict[str, Any]:
    """Start `infertune serve RUN` on a free loopback port, read /v1/config once it is ready,
    and stop it."""
    port = _free_port()
    command = [str(Path(sys.executable).parent / "infertune"), "serve", str(run),
               "--port", str(port)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout_s
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"serve exited: {proc.communicate()[1][-2000:]}"
            try:
                if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                    return dict(httpx.get(url + "/v1/config", timeout=5).json())
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"serve did not become ready in {start_timeout_s:g} s")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_slo_already_met_turns_to_cost(tiny, capsys) -> None:
    out = tiny["root"] / "met"
    # no request rate stated either: no sweep, and serve still gets a (default) policy
    sc = _scenario(tiny["root"], "met", slo={"p95_ms": 5000, "p99_ms": 9000},
                   traffic={"pattern": "steady"})
    assert _run(tiny, sc, out, "45s", "--json") == 0
    report = json.loads((out / "report.json").read_text())
    assert json.loads(capsys.readouterr().out) == report  # --json: stdout is report.json only
    assert report["problem"]["inside_slo"] is True
    assert "already meets the SLO" in report["problem"]["statement"]
    assert "cost" in report["problem"]["statement"]
    assert "question is cost" not in report["problem"]["statement"]  # said once, as measured
    assert report["serving"]["policy_id"] == "default"
    assert "not swept" in report["serving"]["why"]
    ServePolicy(**report["serving"]["policy"])
    assert any("no request rate" in n for n in report["notes"])


def test_no_variant_meets_the_floor_recommends_the_baseline(tiny) -> None:
    out = tiny["root"] / "nofloor"
    floor = {"quality_floor": {"metric": "mean_cosine", "max_drop": 0.0}}
    assert _run(tiny, _scenario(tiny["root"], "nofloor", constraints=floor), out, "45s") == 0
    report = json.loads((out / "report.json").read_text())
    verdicts = {r["variant_id"]: r["quality_verdict"] for r in report["variants"][1:]}
    assert verdicts and "pass" not in verdicts.values()
    rec = report["recommendation"]
    assert rec["variant_id"] == "torch_fp32"
    assert "no variant met the quality floor" in rec["reason"]
    top = [o for o in report["options"] if o["within_risk_budget"]][0]
    assert top["category"] != "variant"  # the top option is a non-quantizing one
    assert_all_figures_have_provenance(report)


def test_budget_too_small_says_what_it_needs(tiny, capsys) -> None:
    rc = _run(tiny, _scenario(tiny["root"], "small"), tiny["root"] / "small", budget="10s")
    assert rc == 1
    err = capsys.readouterr().err
    assert "too small to measure anything" in err and "at least 45 s" in err


def test_an_earlier_run_is_not_overwritten_by_accident(tiny, capsys) -> None:
    out = tiny["root"] / "earlier"
    out.mkdir()
    (out / "report.json").write_text("{}")
    assert _run(tiny, _scenario(tiny["root"], "again"), out) == 1
    err = capsys.readouterr().err
    assert "already holds files" in err and "--overwrite" in err
    assert (out / "report.json").read_text() == "{}"  # untouched
