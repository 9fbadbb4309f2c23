"""`infertune compare` times each side in a process of its own (measure/arm_process.py), as
optimize times its survivors: read back from the models themselves, which log the pid of the
process that computed each request."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from infertune.cli import main

HELPERS = Path(__file__).resolve().parents[2] / "helpers"


@pytest.mark.slow
@pytest.mark.timing_free
def test_compare_runs_each_side_in_its_own_process(tmp_path, monkeypatch, capsys) -> None:
    log = tmp_path / "pids.log"
    monkeypatch.setenv("PID_MODELS_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(HELPERS), os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "compare.json"
    rc = main(["compare", "pid_models:side_a", "pid_models:side_b", "--budget", "1s",
               "--block-size", "10", "--json", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    result = json.loads(out.read_text())
    assert result["where"] == "each side in its own process"
    pid_a, pid_b = result["pids"]
    assert len({pid_a, pid_b, os.getpid()}) == 3
    calls = Counter(tuple(line.split()) for line in log.read_text().splitlines())
    # every timed request (and its warm-up) ran in its side's child; none here, none crossed
    assert calls[("A", str(pid_a))] >= result["stats"]["n_a"]
    assert calls[("B", str(pid_b))] >= result["stats"]["n_b"]
    assert calls[("A", str(pid_b))] == calls[("B", str(pid_a))] == 0
    assert calls[("A", str(os.getpid()))] + calls[("B", str(os.getpid()))] == 0
    assert "(each side in its own process)" in captured.out


def test_compare_side_that_cannot_load_is_one_line(tmp_path, capsys, tiny_onnx_path) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    rc = main(["compare", str(tiny_onnx_path), str(broken), "--budget", "1s"])
    err = capsys.readouterr().err
    assert rc == 1 and "broken.onnx" in err and "Traceback" not in err
