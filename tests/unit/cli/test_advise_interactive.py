"""`infertune advise -i` asks for the missing facts before api.advise builds the advice."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from infertune.cli import main


def test_interactive_asks_then_advises_with_the_answers(
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = tmp_path / "bare.yaml"
    scenario.write_text("model: {name: reranker}\n")
    asked: list[str] = []
    monkeypatch.setattr(typer, "prompt", lambda q, **kw: asked.append(q) or "")
    assert main(["advise", str(scenario), "-i", "--format", "json"]) == 0
    assert asked  # the bare scenario misses facts, so some were asked
    out = capsys.readouterr().out
    assert out.startswith("{") and '"missing_facts"' in out  # empty answers keep them missing
    asked.clear()
    assert main(["advise", str(scenario), "--format", "json"]) == 0
    assert asked == []  # without -i nothing is asked
