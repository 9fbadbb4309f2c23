"""optimize --server-cmd against a server written elsewhere: `transformers serve` (the llm
extra), on two random-weight chat models built here (tests/helpers/tiny_chat_model.py; nothing
is downloaded). The knob is which model the server loads, with an effect the test can predict:
a decode step of the 8-layer, 512-wide model costs far more than one of the 1-layer, 32-wide
model, so under an inter-token SLO between the two the small one must win, and its median ITL
must be well below the large one's. Slow: each server start imports torch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tiny_chat_model import build_chat_model

from infertune.cli import main
from infertune.optimize.server_tune.tune_report import ServerTuneReport

pytestmark = pytest.mark.slow


@pytest.mark.timeout(600)
def test_transformers_serve_search_over_the_model_picks_the_faster_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a local folder: never ask the Hub
    small = build_chat_model(tmp_path / "small", hidden=32, layers=1)
    large = build_chat_model(tmp_path / "large", hidden=512, layers=8)
    program = Path(sys.executable).parent / "transformers"
    out = tmp_path / "run"
    rc = main(["optimize", "--server-cmd",
               f"{program} serve {{model}} --port {{port}} --host {{host}} --device cpu",
               "--search", f"model={small},{large}", "--slo", "itl_p95_ms=150",
               "--rate", "1", "--probe-duration", "3s", "--sweep-steps", "1",
               "--shape", "constant", "--prompt-tokens", "12", "--output-tokens", "8",
               "--warmup-requests", "2", "--ready-timeout", "240", "--confirm-sessions", "0",
               "--out", str(out)])
    assert rc == 0
    report = ServerTuneReport.load(out / "server_tune.json")
    assert report.runtime == "transformers serve"
    by_id = {c.id: c for c in report.candidates}
    fast, slow = by_id[f"model={small}"], by_id[f"model={large}"]
    assert report.winner_id == fast.id and fast.rank == 1
    assert report.winner_command is not None and str(small) in report.winner_command
    assert fast.at_chosen is not None and slow.at_chosen is not None
    assert fast.at_chosen.ok == fast.at_chosen.sent == 3  # every stream whole (no [DONE])
    assert fast.at_chosen.itl is not None and slow.at_chosen.itl is not None
    assert fast.at_chosen.itl.count == 3 * 7  # one event per token: 8 tokens, 7 gaps
    # the medians, not the small model's p95 against the large one's median: the tiny model's
    # 21 gaps are mostly under a millisecond with one or two of ~8 ms (the server's streaming
    # thread, not the model), so its p95 is one of those and sat at 7.9 ms against the large
    # model's 7.2 ms median in one CI run, though its median was 0.5 ms
    assert fast.at_chosen.itl.p50.value < slow.at_chosen.itl.p50.value / 2
    # whether the 8-layer model also meets 150 ms ITL at 1 req/s depends on the CPU (it did on
    # a 2-core AVX-512 EPYC): it never out-ranks the small one on goodput
    assert fast.goodput_rps >= slow.goodput_rps
    if slow.chosen_rate is None:
        assert fast.goodput_rps > slow.goodput_rps
