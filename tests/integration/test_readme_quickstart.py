"""The README's quickstart, run exactly as written: the block marked <!-- quickstart --> is
read from README.md and each of its commands run by bash, in a working directory holding the
files the README says a user brings (a tiny model.onnx, inputs.npz, and the README's own
scenario.yaml), with the venv's `infertune` on PATH."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from guide_files import README, commands, marked_block, write_guide_files

from infertune.report.schema import Report

# a whole optimize run (--quick --budget 1m), about 70 s; timing_free: every assertion is the
# exit codes and what the run folder holds (report.json with a recommendation, report.md/html,
# the recommended variant's manifest), which hold whatever the timings say: a baseline kept, or
# fewer variants measured on a busy machine, still leaves a recommendation and its folder
pytestmark = [pytest.mark.slow, pytest.mark.timing_free]


def test_the_quickstart_runs_as_written(tmp_path: Path) -> None:
    steps = commands(marked_block(README, "quickstart"))
    assert [s.split()[1] for s in steps] == ["doctor", "advise", "optimize", "report"]
    write_guide_files(tmp_path)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for step in steps:
        done = subprocess.run(["bash", "-c", step], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=240)
        assert done.returncode == 0, f"{step}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        if step.startswith("infertune advise"):
            assert "## " in done.stdout  # the markdown advice on stdout
    run = tmp_path / "runs" / "my-model"
    report = Report.load_json(run / "report.json")
    assert report.kind == "run" and report.recommendation is not None
    assert (run / "report.md").is_file() and (run / "report.html").is_file()
    variant = report.recommendation.variant_id
    assert variant is not None and (run / "variants" / variant / "manifest.json").is_file()
