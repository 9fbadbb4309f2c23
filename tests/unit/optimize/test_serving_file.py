"""serving.json as the sweep stage writes it (stages/sweep.py: a ServingFile of optimize's
values as dicts) reads back through RunDir into the same optimize types."""

from __future__ import annotations

import json
from pathlib import Path

from test_run_record import record

from infertune.artifacts import RunDir, ServingFile
from infertune.measure.curve import CurvePoint, ServiceCurve
from infertune.optimize.served.cascade_eval import right_size
from infertune.optimize.served.policy_sweep import SweepResult
from infertune.optimize.served.traffic import Validation


def test_the_sweep_stages_serving_file_reads_back_as_optimize_types(tmp_path: Path) -> None:
    rec = record(tmp_path)
    assert rec.sweep.sweep is not None
    curve = ServiceCurve([CurvePoint(1, None, 5.0, 6.0, 5.0, 5, 200.0)], runtime="onnxruntime")
    sizing = right_size(30.0, rec.sweep.sweep.best.goodput_rps, 2, 0.2)
    assert sizing is not None
    run = RunDir(tmp_path)
    ServingFile(variant_id=rec.sweep.sweep.variant_id, sweep=rec.sweep.sweep.to_dict(),
                finalists=[rec.sweep.sweep.to_dict()], curve=curve, overhead_ms=0.3,
                validations={k: v.to_dict() for k, v in rec.sweep.validations.items()},
                right_sizing=sizing.to_dict()).save(run.paths.serving)
    assert json.loads(run.paths.serving.read_text())["schema"] == "infertune.serving/v1"
    serving = run.serving()
    assert serving.sweep is not None and SweepResult.from_dict(serving.sweep) == rec.sweep.sweep
    assert {k: Validation.from_dict(v) for k, v in serving.validations.items()} == \
        rec.sweep.validations
    assert serving.curve == curve and serving.simulated_goodput == sizing.goodput_per_instance
