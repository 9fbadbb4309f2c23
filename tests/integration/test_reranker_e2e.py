"""The problem statement's own example end to end, on a tiny cross-encoder built in the test
(random weights, saved by the installed transformers): `optimize` judges its variants by NDCG@10
per query with a CI over queries; `serve` answers [query, passage] pairs with the scores of the
model called directly and refuses a single string; the Triton export tokenizes pairs as serve
does; a model whose outputs never vary fails `validate` and `optimize` with one line."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from cross_encoder import direct_scores, make_tiny_cross_encoder
from export_checks import Request, model_config_class, stub_module
from google.protobuf import text_format

from infertune.cli import main
from infertune.data import BUNDLED_RERANKING, reranking_heldout
from infertune.data.text_inputs import TextPair
from infertune.models import load

pytestmark = pytest.mark.slow  # a whole optimize run (about a minute) and served models
ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "examples" / "scenarios" / "reranker-cpu.yaml"
PAIRS = [("what is the capital of france", "Paris is the capital of France and its largest city."),
         ("how to boil an egg", "Bananas are yellow."),
         ("how to boil an egg", "Lower the egg into boiling water and cook it for seven minutes.")]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("reranker")
    return {"root": root, "model": make_tiny_cross_encoder(root / "model"),
            "constant": make_tiny_cross_encoder(root / "constant", constant=True)}


@pytest.fixture(scope="module")
def run(models: dict[str, Path]) -> Path:
    out = models["root"] / "run"
    code = main(["optimize", str(models["model"]), "--scenario", str(SCENARIO), "--data",
                 str(BUNDLED_RERANKING), "--quick", "--budget", "120s", "--out", str(out)])
    assert code == 0
    return out


def _int8_variant(run: Path) -> Path:
    built = [m.parent for m in sorted((run / "variants").glob("*/manifest.json"))
             if json.loads(m.read_text())["precision"].startswith("int8")]
    assert built, f"no INT8 variant built in {run}: {sorted(os.listdir(run / 'variants'))}"
    return built[0]


def _assert_judged_by_ndcg_per_query(quality: dict[str, Any]) -> None:
    assert quality["task"] == "reranking"
    check = quality["floor_check"]
    assert check["floor"]["metric"] == "ndcg@10" and check["floor"]["kind"] == "drop"
    assert check["ci_low"] <= check["estimate"] <= check["ci_high"]
    # quality is judged on whole queries (5 passages each): resampled by query, not row
    n_queries = quality["n_examples"] // 5
    assert f"over {n_queries} queries" in check["explanation"]
    assert {m["name"] for m in quality["metrics"]} == {"ndcg@10", "mrr@10", "rank_agreement",
                                                       "max_abs_diff"}
    ndcg = next(m for m in quality["metrics"] if m["name"] == "ndcg@10")
    assert ndcg["baseline_value"] < 1.0  # scored against the relevance labels, not itself


def test_the_recommended_variant_was_judged_by_ndcg_per_query(run: Path) -> None:
    report = json.loads((run / "report.json").read_text())
    variant = report["recommendation"]["variant_id"]
    assert variant in {p.name for p in (run / "variants").iterdir()}
    _assert_judged_by_ndcg_per_query(
        json.loads((run / "variants" / variant / "quality.json").read_text()))


def test_int8_variant_is_judged_by_ndcg_per_query(run: Path, models: dict[str, Path],
                                                  tmp_path: Path) -> None:
    # Whether optimize judges the INT8 variant's quality depends on this machine's speed:
    # screening stops a variant that cannot beat the fastest one before its quality costs
    # time (CI's CPU stopped it; this one did not). `validate` judges it either way.
    out = tmp_path / "quality.json"
    code = main(["validate", str(models["model"]), str(_int8_variant(run)), "--data",
                 str(BUNDLED_RERANKING), "--scenario", str(SCENARIO), "--json", str(out)])
    assert code in (0, 1)  # pass, or fail / inconclusive: judged either way
    _assert_judged_by_ndcg_per_query(json.loads(out.read_text()))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _serving(target: Path) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "infertune"), "serve",
                             str(target), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"serve exited: {proc.communicate()[1][-2000:]}"
            try:
                if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            raise AssertionError("serve did not become ready in 120 s")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def served_model(models: dict[str, Path]) -> Iterator[str]:
    with _serving(models["model"]) as url:
        yield url


def test_serve_scores_pairs_as_the_model_called_directly(served_model: str,
                                                         models: dict[str, Path]) -> None:
    body = {"inputs": [list(PAIRS[0]), {"query": PAIRS[1][0], "passage": PAIRS[1][1]},
                       {"text": PAIRS[2][0], "text_pair": PAIRS[2][1]}]}
    answer = httpx.post(served_model + "/v1/predict", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    scores = answer.json()["outputs"]
    np.testing.assert_allclose(scores, direct_scores(models["model"], PAIRS), atol=1e-5)
    assert len({round(s, 6) for s in scores}) == 3
    single = httpx.post(served_model + "/v1/predict", timeout=30,
                        json={"inputs": ["what is the capital of france [SEP] Paris"]})
    assert single.status_code == 422
    assert single.json()["error"].startswith("inputs[0] is a single string; this reranking "
                                             "model (a cross-encoder) scores [query, passage]")
    schema = httpx.get(served_model + "/openapi.json", timeout=10).json()
    items = schema["components"]["schemas"]["PredictRequest"]["properties"]["inputs"]["items"]
    assert [form["type"] for form in items["anyOf"]] == ["array", "object", "object"]


def test_serve_the_run_answers_pairs(run: Path) -> None:
    variant = json.loads((run / "report.json").read_text())["recommendation"]["variant_id"]
    expected = load(run / "variants" / variant).predict([TextPair(*p) for p in PAIRS])
    with _serving(run) as url:
        answer = httpx.post(url + "/v1/predict", json={"inputs": [list(p) for p in PAIRS]},
                            timeout=30)
    assert answer.status_code == 200, answer.text
    np.testing.assert_allclose(answer.json()["outputs"], expected, atol=1e-5)


def test_triton_export_tokenizes_pairs_as_serve_does(run: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "triton"
    assert main(["export", str(run), "--to", "triton", "--out", str(out)]) == 0
    configs = {p.parent.name: text_format.Parse(p.read_text(), model_config_class()())
               for p in out.glob("*/config.pbtxt")}
    ensemble = next(c for c in configs.values() if c.platform == "ensemble")
    assert [i.name for i in ensemble.input] == ["TEXT", "TEXT_PAIR"]
    tokenize_dir = next(out / name for name in configs if name.endswith("_tokenize"))
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", stub_module())
    spec = importlib.util.spec_from_file_location("tokenize_model",
                                                  tokenize_dir / "1" / "model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model: Any = module.TritonPythonModel()
    model.initialize({"model_repository": str(tokenize_dir), "model_version": "1",
                      "model_config": "{}"})
    pairs = [TextPair(*p) for p in PAIRS] + [TextPair(" ".join(["capital"] * 300), "paris")]
    request = Request(TEXT=np.array([[p.query.encode()] for p in pairs], dtype=object),
                      TEXT_PAIR=np.array([[p.passage.encode()] for p in pairs], dtype=object))
    (response,) = model.execute([request])
    assert response.error is None
    variant = json.loads((run / "report.json").read_text())["recommendation"]["variant_id"]
    expected = load(run / "variants" / variant).preprocess(pairs)
    for name in ("input_ids", "attention_mask", "token_type_ids"):
        np.testing.assert_array_equal(response.outputs[name], expected[name])
    missing = Request(TEXT=np.array([[b"q"]], dtype=object))
    (refused,) = model.execute([missing])
    assert "TEXT_PAIR is missing" in refused.error.message


def test_constant_outputs_fail_validate_and_optimize(models: dict[str, Path],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    constant = str(models["constant"])
    assert main(["validate", constant, constant, "--data", str(BUNDLED_RERANKING),
                 "--floor", "ndcg@10 drop<=0.01"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "returns the same output for all 150 held-out inputs" in err[0]
    assert main(["optimize", constant, "--scenario", str(SCENARIO), "--data",
                 str(BUNDLED_RERANKING), "--quick", "--budget", "60s", "--out",
                 str(models["root"] / "constant_run")]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "returns the same output" in err[0]


def test_bundled_reranking_set_reads_as_pairs() -> None:
    data = reranking_heldout()
    assert isinstance(data.inputs[0], TextPair) and data.groups is not None
