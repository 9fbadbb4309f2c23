"""advise --measure on a Hugging Face text model: the fused and INT8 variants are built and
A/B-measured here, so the p50/p95 impact of "ort-fusion" and "int8-cpu" becomes measured
(naming this machine) while every other figure stays an estimate."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from infertune.config import load_scenario
from infertune.models.loaders import load_torch_file
from infertune.optimize.quickcheck import check_variants
from infertune.report.advisor import advise
from infertune.report.measured import add_measurements
from infertune.report.provenance import assert_all_figures_have_provenance

ROOT = Path(__file__).resolve().parents[3]
MINILM_CPU = ROOT / "examples" / "scenarios" / "minilm-cpu.yaml"
MEASURED_IDS = {"ort-fusion", "int8-cpu"}


def _helpers():  # type: ignore[no-untyped-def]
    path = ROOT / "tests" / "unit" / "optimize" / "optimize_tiny_helpers.py"
    spec = importlib.util.spec_from_file_location("report_measure_tiny_helpers", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.fixture(scope="module")
def measured(tmp_path_factory):  # type: ignore[no-untyped-def]
    helpers = _helpers()
    folder = helpers.make_tiny_bert(tmp_path_factory.mktemp("tiny") / "bert")
    sc = load_scenario(MINILM_CPU)
    base = advise(sc)
    report = add_measurements(base, sc, str(folder), requests=40, budget_s=3.0,
                              hardware_text="test machine", variant_budget_s=2.0,
                              check=check_variants,
                              hardware=helpers.hardware(["avx2", "avx512f", "avx512_vnni"]))
    return base, report


def test_both_options_get_measured_p50_p95_and_keep_other_estimates(measured) -> None:
    base, report = measured
    assert MEASURED_IDS <= {o.id for o in base.options}
    by_id = {o.id: o for o in report.options}
    for oid in MEASURED_IDS:
        opt = by_id[oid]
        assert opt.source == "measured"
        for key in ("p50", "p95"):
            fig = getattr(opt.impact, key)
            assert fig.source == "measured", (oid, key, fig)
            assert fig.value is not None and fig.unit == f"% change in {key}"
            assert fig.samples is not None and fig.samples >= 1
            assert f"measured on test machine with {fig.samples} samples" in fig.basis
            assert "interleaved A/B at batch 1" in fig.basis
        for key in ("p99", "throughput", "cost"):
            fig = getattr(opt.impact, key)
            if fig is not None:
                assert fig.source == "estimate" and fig.basis.startswith("estimate")
    for oid in MEASURED_IDS:  # the build-time agreement check rides along in the basis
        assert "agreement with the baseline: mean cosine" in by_id[oid].impact.p95.basis
    # every other option is unchanged: same estimates as advise alone
    base_by_id = {o.id: o for o in base.options}
    for oid, opt in by_id.items():
        if oid not in MEASURED_IDS:
            assert opt == base_by_id[oid]
            assert opt.source == "estimate"


def test_note_lists_measured_and_estimated_and_provenance_holds(measured) -> None:
    _, report = measured
    note = report.notes[-1]
    assert "ort-fusion p50 and p95 (ort_fused against the baseline)" in note
    assert "int8-cpu p50 and p95 (ort_int8_dynamic_per_channel against the baseline)" in note
    assert "still estimates" in note and "queueing figures" in note
    data = report.to_dict()
    assert_all_figures_have_provenance(data)
    # the measured option survives a JSON round trip
    from infertune.report.schema import Report

    assert Report.from_dict(data) == report


def test_non_text_model_keeps_option_estimates_with_a_note(tmp_path) -> None:
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    path = tmp_path / "tiny.pt"
    torch.jit.trace(net.eval(), torch.zeros(1, 8)).save(str(path))
    sc = load_scenario(MINILM_CPU)
    base = advise(sc)
    example = np.zeros((1, 8), dtype=np.float32)
    report = add_measurements(base, sc, str(path), requests=30, budget_s=2.0,
                              load=lambda ref: load_torch_file(Path(ref), example=example),
                              hardware_text="test machine", check=check_variants)
    assert report.options == base.options
    assert all(o.source == "estimate" for o in report.options)
    note = report.notes[-1]
    assert "option impacts and queueing figures remain estimates" in note
    assert "variants were not measured" in note and "'tensor'" in note
    assert_all_figures_have_provenance(report.to_dict())
