"""The readers moved onto RunDir still read a whole run folder (the export fixture's, with a
serving.json as the sweep stage writes it): serve's autoscaling facts and `infertune serve`'s
target."""

from __future__ import annotations

from pathlib import Path

from export_run import POLICY, SLO, make_run

from infertune.artifacts import RunDir, ServingFile
from infertune.cli.serving import resolve_target
from infertune.measure.curve import CurvePoint, ServiceCurve
from infertune.serve.alerts import run_slo
from infertune.serve.engines.run_facts import read_run


def test_serve_reads_a_run_folder_through_run_dir(tmp_path: Path) -> None:
    folder = make_run(tmp_path, kind="tensor", vid="ort_fp32")
    curve = ServiceCurve([CurvePoint(1, None, 4.0, 5.0, 4.0, 5, 250.0),
                          CurvePoint(8, None, 12.0, 14.0, 12.0, 5, 666.0)], runtime="onnxruntime")
    run = RunDir(folder)
    ServingFile(variant_id="ort_fp32", curve=curve,
                right_sizing={"goodput_per_instance": 180.0}).save(run.paths.serving)
    facts = read_run(folder, batch_sizes=(1, 8))
    assert facts.service_ms == {1: 4.0, 8: 12.0}
    assert facts.goodput is not None and facts.goodput.value == 180.0
    assert facts.goodput.source == f"estimate: simulated goodput in {run.paths.serving}"
    assert facts.demand.slo_ms == SLO["p99_ms"]
    ref, layer = resolve_target(str(folder))
    assert ref == str(folder / "variants" / "ort_fp32")
    assert layer.max_batch_size == POLICY.max_batch_size
    assert layer.max_wait_ms == POLICY.max_wait_ms
    assert run_slo(folder).targets() == {"p95": SLO["p95_ms"], "p99": SLO["p99_ms"]}
