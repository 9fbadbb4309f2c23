"""advise --measure: a quick measurement of a tiny TorchScript model replaces the estimated
diagnosis with measured figures (named machine, sample count) while options stay estimates."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from infertune.config import load_scenario
from infertune.models.loaders import load_torch_file
from infertune.report.advisor import advise
from infertune.report.measured import add_measurements
from infertune.report.provenance import assert_all_figures_have_provenance
from infertune.report.render import render
from infertune.report.render_md import SUMMARY_END

RERANKER = Path(__file__).resolve().parents[3] / "examples" / "scenarios" / "reranker-t4.yaml"


@pytest.fixture
def tiny_model(tmp_path: Path) -> Path:
    import torch
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    path = tmp_path / "tiny.pt"
    torch.jit.trace(net.eval(), torch.zeros(1, 8)).save(str(path))
    return path


def test_measure_replaces_the_diagnosis_and_keeps_options_estimates(tiny_model) -> None:
    base = advise(load_scenario(RERANKER))
    example = np.zeros((1, 8), dtype=np.float32)
    report = add_measurements(
        base, load_scenario(RERANKER), str(tiny_model), requests=40, budget_s=5.0,
        load=lambda ref: load_torch_file(Path(ref), example=example),
        hardware_text="test machine")
    figs = report.diagnosis.figures
    p50 = figs["measured_e2e_p50"]
    assert p50.source == "measured" and p50.samples == 40 and p50.value > 0
    assert p50.basis.endswith("measured on test machine with 40 samples")
    assert figs["kingman_wait_at_70pct"].source == "estimate"
    stages = {it.stage: it for it in report.diagnosis.items}
    assert {"queueing", "preprocessing / tokenisation", "forward pass", "postprocessing",
            "glue between stages"} == set(stages)
    assert stages["forward pass"].time.source == "measured"
    assert stages["queueing"].time is None
    assert all(o.source == "estimate" for o in report.options)
    assert len(report.plots.latency_cdf[0].points) == 40
    assert report.plots.latency_cdf[0].points[-1][1] == 1.0
    assert "option impacts and queueing figures remain estimates" in report.notes[-1]
    data = report.to_dict()
    assert_all_figures_have_provenance(data)
    md = render(report, "md")
    assert "End-to-end p50 / p95 / p99 measured here:" in md.split(SUMMARY_END)[0]
    assert "(measured)" in md and "(estimate)" in md
    assert render(report, "html").count("<svg") == 2  # CDF and stage breakdown, nothing else


def test_measure_with_a_missing_model_is_one_line_exit_1(tmp_path, capsys) -> None:
    from infertune.cli import main

    assert main(["advise", str(RERANKER), "--measure", str(tmp_path / "nope.onnx")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: model ") and "not found" in err[-1]
