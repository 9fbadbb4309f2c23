"""The cascade with two real (tiny, random-weight) Hugging Face classifiers over HTTP: each
answer is exactly the fast model's where it was confident and the full model's elsewhere, and
the escalated share follows the threshold."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml
from conftest import free_port, running

from infertune.config import ServePolicy
from infertune.models import load
from infertune.serve import create_app
from infertune.serve.cascade import confidence

WORDS = "how do i reset my password the report shows revenue grew fast slow answer".split()


def _classifier(folder: Path, layers: int, seed: int) -> Path:
    import torch
    import transformers

    folder.mkdir(parents=True)
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=5 + len(WORDS), hidden_size=32, num_hidden_layers=layers,
        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64, num_labels=3,
        initializer_range=0.5)  # wide weights: confidences spread over (1/3, 1)
    transformers.BertForSequenceClassification(config).eval().save_pretrained(folder)
    transformers.BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("cascade")
    full = load(_classifier(root / "full", layers=2, seed=0), task="classification")
    fast = load(_classifier(root / "fast", layers=1, seed=1), task="classification")
    return full, fast


def test_cascade_of_real_classifiers_answers_from_the_right_model(models) -> None:
    full, fast = models
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(3, 9))) for _ in range(24)]
    texts = list(dict.fromkeys(texts))  # distinct, so the cache answers none of them
    fast_out, full_out = fast.predict(texts), full.predict(texts)
    scores = [confidence(out, "probability") for out in fast_out]
    assert all(s is not None for s in scores)
    threshold = float(np.median(scores))
    policy = ServePolicy(cascade_threshold=threshold, max_wait_ms=0, warmup=False)
    app = create_app(full, policy, fast_adapter=fast)
    with running(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        answer = client.post("/v1/predict", json={"inputs": texts, "tier": "standard"})
        assert answer.status_code == 200, answer.text
        outputs = answer.json()["outputs"]
        metrics = client.get("/metrics").text
    escalated = 0
    for out, score, mine_fast, mine_full in zip(outputs, scores, fast_out, full_out,
                                                strict=True):
        expected = mine_fast if score >= threshold else mine_full
        escalated += score < threshold
        np.testing.assert_allclose(out, expected, atol=1e-5)
        assert sum(out) == pytest.approx(1.0, abs=1e-5)  # class probabilities
    assert 0 < escalated < len(texts)
    assert f'infertune_cascade_inputs_total{{outcome="escalated"}} {float(escalated)}' in metrics
    assert (f'infertune_cascade_inputs_total{{outcome="fast"}} '
            f'{float(len(texts) - escalated)}') in metrics


@pytest.mark.slow
def test_the_serve_command_runs_the_cascade_with_fast_model(models, tmp_path) -> None:
    """`infertune serve FULL --fast-model FAST` in its own process, over real HTTP: the same
    split as the in-process app above, from the command a user types."""
    full, fast = models
    rng = np.random.default_rng(1)
    texts = list(dict.fromkeys(" ".join(rng.choice(WORDS, size=rng.integers(3, 9)))
                               for _ in range(16)))
    scores = [confidence(out, "probability") for out in fast.predict(texts)]
    threshold = float(np.median(scores))
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump({"cascade_threshold": threshold, "max_wait_ms": 0}))
    port = free_port()
    command = [sys.executable, "-c", "from infertune.cli import entry; entry()", "serve",
               str(full.info.source), "--fast-model", str(fast.info.source), "--config",
               str(config), "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            _wait_ready(client, server)
            answer = client.post("/v1/predict", json={"inputs": texts})
            assert answer.status_code == 200, answer.text
            metrics = client.get("/metrics").text
    finally:
        server.send_signal(signal.SIGTERM)
        log = server.communicate(timeout=60)[0]
    # uvicorn drains, then re-raises the SIGTERM it caught: the process ends by that signal
    assert server.returncode in (0, -signal.SIGTERM), log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    escalated = sum(s < threshold for s in scores)
    assert 0 < escalated < len(texts)
    assert f'infertune_cascade_inputs_total{{outcome="escalated"}} {float(escalated)}' in metrics
    fast_out, full_out = fast.predict(texts), full.predict(texts)
    for out, score, mine_fast, mine_full in zip(answer.json()["outputs"], scores, fast_out,
                                                full_out, strict=True):
        np.testing.assert_allclose(out, mine_fast if score >= threshold else mine_full,
                                   atol=1e-5)


def _wait_ready(client: httpx.Client, server: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert server.poll() is None, server.communicate()[0][-3000:]
        try:
            if client.get("/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"the server was not ready within {timeout_s} s")
