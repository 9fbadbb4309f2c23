"""advise for an LLM server points at `optimize --server-cmd` as the way to measure its knob
advice (issue 30), and every command line it suggests passes that command's own knob check."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from infertune.cli import main
from infertune.config import load_scenario
from infertune.optimize.server_tune.command import ServerCommand, parse_search
from infertune.report.advisor import advise
from infertune.report.knowledge import load_knowledge

CHAT = Path(__file__).resolve().parents[3] / "examples" / "scenarios" / "chat-vllm-l4.yaml"


def test_advise_for_vllm_points_at_optimize_server_cmd(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    report = advise(load_scenario(CHAT))
    verify = {o.id: o.verify for o in report.options}
    for knob in ("vllm-max-num-seqs", "vllm-batched-tokens", "vllm-prefix-caching"):
        assert verify[knob].startswith("infertune optimize --server-cmd \"vllm serve MODEL "
                                       "--port {port} "), verify[knob]
    assert main(["advise", str(CHAT)]) == 0
    md = capsys.readouterr().out
    assert ('infertune optimize --server-cmd "vllm serve MODEL --port {port} --max-num-seqs '
            '{max_num_seqs}" --search max_num_seqs=64,128,256') in md


def test_every_suggested_server_search_passes_the_knob_check() -> None:
    suggested = [e for e in load_knowledge().entries if "--server-cmd" in e.verify]
    assert {e.id for e in suggested} >= {"vllm-max-num-seqs", "vllm-batched-tokens",
                                         "vllm-prefix-caching", "tgi-batch-tokens",
                                         "llamacpp-slots"}
    for entry in suggested:
        words = shlex.split(entry.verify.split(":")[0])
        command = words[words.index("--server-cmd") + 1]
        searches = [words[i + 1] for i, w in enumerate(words) if w == "--search"]
        checked = ServerCommand(command, parse_search(searches))  # raises on a bad knob
        assert checked.runtime is not None and checked.candidates(), entry.id
