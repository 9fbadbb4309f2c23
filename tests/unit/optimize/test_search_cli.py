"""`infertune optimize` refuses bad input in one line (exit 1) before any measurement."""

from __future__ import annotations

from pathlib import Path

import pytest

from infertune.cli import main

SCENARIO = Path(__file__).resolve().parents[3] / "examples" / "scenarios" / "minilm-cpu.yaml"


@pytest.mark.parametrize(("args", "message"), [
    (["minilm", "--scenario", "nope.yaml"], "scenario file nope.yaml not found"),
    (["minilm", "--scenario", str(SCENARIO), "--budget", "soon"],
     "--budget 'soon' is not a duration"),
    (["minilm", "--scenario", str(SCENARIO), "--budget", "20s"], "too small to measure"),
    (["some/model", "--scenario", str(SCENARIO)], "no held-out data for 'some/model'"),
    (["minilm", "--scenario", str(SCENARIO), "--data", "missing.jsonl"], "not found"),
    (["no/such/model", "--scenario", str(SCENARIO), "--data",
      str(Path(__file__).resolve().parents[3] / "src" / "infertune" / "data"
          / "minilm_heldout.jsonl")], "model 'no/such/model' not found"),
])
def test_bad_input_is_one_line_exit_1(args, message, capsys, tmp_path) -> None:
    rc = main(["optimize", *args, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 1
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and message in errors[0]  # progress lines may precede it
    assert not (tmp_path / "run").exists()  # nothing was started
