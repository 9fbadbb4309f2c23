"""The example on docs/python-api.md, run as written: the block marked <!-- api-example -->
is executed in a working directory holding the files it names (a tiny model.onnx,
inputs.npz, the README's scenario.yaml and bodies.jsonl). It advises, optimizes (--quick,
one minute), serves the recommendation on a free port and load-tests it over HTTP."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from guide_files import ROOT, marked_block, write_guide_files

pytestmark = pytest.mark.slow  # a whole optimize run (quick, budget 1m), then 5 s of load

PAGE = ROOT / "docs" / "python-api.md"


def test_the_api_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    write_guide_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "api_example"}
    exec(compile(marked_block(PAGE, "api-example"), str(PAGE), "exec"), namespace)
    run = namespace["run"]
    result = namespace["result"]
    assert run.run_dir == Path("runs/my-model")  # type: ignore[attr-defined]
    assert run.report.kind == "run"  # type: ignore[attr-defined]
    assert run.recommended_variant.is_dir()  # type: ignore[attr-defined]
    assert result.sent > 0 and result.ok == result.sent  # type: ignore[attr-defined]
    assert result.status_counts == {"200": result.sent}  # type: ignore[attr-defined]
    printed = capsys.readouterr().out
    sent = result.sent  # type: ignore[attr-defined]
    assert re.search(rf"{sent} of {sent} answered; p99 [\d.]+ ms", printed)
