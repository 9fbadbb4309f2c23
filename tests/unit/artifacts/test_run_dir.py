"""artifacts: the typed run files (round trips, old folders, schema and version errors) and
RunDir, the one reader of a run folder (typed returns, one-line errors)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from export_run import CORES, SLO, make_run
from report_fixture import report_dict

from infertune.artifacts import Artifact, ExtrasFile, RunDir, ServingFile
from infertune.errors import ConfigError, ModelLoadError
from infertune.measure.curve import CurvePoint, ServiceCurve
from infertune.optimize.record import RunRecord
from infertune.report.schema import Report

# the keys the sweep stage's serving writer put in serving.json before it moved onto
# ServingFile (optimize/policy.py, now stages/sweep.py); an old folder has exactly these and no
# schema key
SERVING_KEYS = ["variant_id", "sweep", "finalists", "curve", "contention", "overhead_ms",
                "validations", "right_sizing"]


def _curve() -> ServiceCurve:
    points = [CurvePoint(b, None, ms, ms * 1.2, ms, 5, b / (ms / 1000))
              for b, ms in ((1, 5.0), (8, 20.0))]
    return ServiceCurve(points=points, runtime="onnxruntime")


def _old_serving() -> dict[str, Any]:
    """serving.json as the code before ServingFile wrote it (the values optimize types are
    opaque objects here)."""
    return {"variant_id": "ort_int8", "sweep": {"variant_id": "ort_int8", "policies": []},
            "finalists": [{"variant_id": "ort_int8", "policies": []}],
            "curve": _curve().to_dict(), "contention": {"factor": 1.1},
            "overhead_ms": 0.4, "validations": {"p2": {"policy_id": "p2"}},
            "right_sizing": {"peak_rps": 700.0, "goodput_per_instance": 180.0, "instances": 4,
                             "cores_per_instance": 2, "cores": 8, "cost_per_hour_usd": None}}


def test_serving_file_round_trips_and_keeps_the_old_keys(tmp_path: Path) -> None:
    serving = ServingFile.from_dict(_old_serving())
    assert serving.curve == _curve() and serving.simulated_goodput == 180.0
    serving.save(tmp_path / "serving.json")
    written = json.loads((tmp_path / "serving.json").read_text())
    assert list(written) == [*SERVING_KEYS, "schema"]
    assert written["schema"] == "infertune.serving/v1"
    assert {k: written[k] for k in SERVING_KEYS} == _old_serving()
    assert ServingFile.load(tmp_path / "serving.json") == serving


def test_extras_file_round_trips(tmp_path: Path) -> None:
    extras = ExtrasFile(candidates=[{"variant_id": "small"}], cascades=[{"names": ["a", "b"]}])
    extras.save(tmp_path / "extras.json")
    assert ExtrasFile.load(tmp_path / "extras.json") == extras
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"candidates": [{"variant_id": "small"}], "cascades": []}))
    assert ExtrasFile.load(old).candidates == [{"variant_id": "small"}]


def test_an_old_folder_loads_with_and_without_its_optional_keys(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.paths.serving.write_text(json.dumps(_old_serving()))
    assert run.serving() == ServingFile.from_dict(_old_serving())
    run.paths.serving.write_text(json.dumps({"curve": _curve().to_dict()}))
    minimal = run.serving()
    assert (minimal.curve, minimal.variant_id, minimal.right_sizing) == (_curve(), None, None)
    assert minimal.simulated_goodput is None and minimal.validations == {}


def test_another_schema_or_a_newer_version_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "serving.json"
    path.write_text(json.dumps({"schema": "infertune.extras/v1"}))
    with pytest.raises(ConfigError) as other:
        ServingFile.load(path)
    assert str(other.value) == (
        f"{path}: schema 'infertune.extras/v1' is not 'infertune.serving/v1'; re-run infertune "
        "optimize with this version, or pass the file it wrote")
    path.write_text(json.dumps({"schema": "infertune.serving/v3", "curve": None}))
    with pytest.raises(ConfigError) as newer:
        ServingFile.load(path)
    assert str(newer.value) == (
        f"{path}: schema 'infertune.serving/v3' is newer than this infertune reads "
        "(infertune.serving/v1); re-run infertune optimize with this version, or install the "
        "infertune release that wrote it")
    assert "\n" not in str(newer.value)
    run = RunDir(tmp_path)  # run.json keeps its own reader, and the same check
    run.paths.run_json.write_text(json.dumps({"schema": "infertune.run/v3"}))
    with pytest.raises(ConfigError, match=r"run.json: schema 'infertune.run/v3' is newer than "
                       r"this infertune reads \(infertune.run/v2\); re-run infertune optimize "
                       "with this version, or install the infertune release that wrote it$"):
        run.record(RunRecord)


@dataclass
class _Renamed(Artifact):
    """v2 renamed v1's ``ms`` to ``p50_ms``; v1 files migrate."""

    SCHEMA: ClassVar[str] = "infertune.test"
    VERSION: ClassVar[int] = 2

    p50_ms: float = 0.0

    @classmethod
    def migrate(cls, data: dict[str, Any], version: int, path: Path) -> dict[str, Any]:
        return {"p50_ms": data["ms"]}


@dataclass
class _Strict(Artifact):
    SCHEMA: ClassVar[str] = "infertune.test"
    VERSION: ClassVar[int] = 2

    p50_ms: float = 0.0


def test_an_older_version_migrates_or_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"schema": "infertune.test/v1", "ms": 3}))
    assert _Renamed.load(path) == _Renamed(3.0)
    with pytest.raises(ConfigError, match=r"a.json: schema 'infertune.test/v1' is older than "
                       r"this infertune reads \(infertune.test/v2\); re-run infertune "
                       r"optimize with this version"):
        _Strict.load(path)
    path.write_text(json.dumps({"p50_ms": 1.0}))  # no schema key: refused unless UNNAMED
    with pytest.raises(ConfigError, match="schema None is not 'infertune.test/v2'"):
        _Strict.load(path)


def test_damaged_missing_and_mistyped_files_name_the_file(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    with pytest.raises(ConfigError, match=r"serving.json: cannot be read \(No such file or "
                       r"directory\); rerun infertune optimize$"):
        run.serving()
    run.paths.serving.write_text('{"curve": ')
    with pytest.raises(ConfigError, match=r"serving.json: not valid JSON at line 1, column 11 "):
        run.serving()
    run.paths.serving.write_text("[1]")
    with pytest.raises(ConfigError, match="serving.json: the top level must be an object"):
        run.serving()
    run.paths.serving.write_text(json.dumps({"overhead_ms": "fast"}))
    with pytest.raises(ConfigError, match="serving.json: ServingFile.overhead_ms: expected a "
                       "number, found 'fast'; rerun infertune optimize"):
        run.serving()
    run.paths.hardware.write_text(json.dumps({"schema": "infertune.hardware/v9"}))
    with pytest.raises(ConfigError, match="hardware.json: hardware schema"):
        run.hardware()
    with pytest.raises(ConfigError, match=r"scenario.yaml: not found; rerun infertune optimize"):
        run.scenario()
    with pytest.raises(ConfigError, match="report.json not found; pass a run folder"):
        run.report(Report)
    with pytest.raises(ConfigError, match="run.json not found"):
        run.record(RunRecord)
    assert not run.exists_run()


def test_a_run_folder_reads_typed(tmp_path: Path) -> None:
    folder = make_run(tmp_path, kind="tensor", vid="ort_fp32")
    run = RunDir(folder)
    assert run.exists_run()
    report = run.report(Report)
    assert report.recommendation is not None and report.recommendation.variant_id == "ort_fp32"
    assert run.hardware().logical_cores == CORES
    assert run.scenario().slo.targets() == {k.removesuffix("_ms"): v for k, v in SLO.items()}
    variant = run.variant("ort_fp32")
    assert variant.path == folder / "variants" / "ort_fp32" and variant.manifest.id == "ort_fp32"
    assert run.variant_ids() == ["ort_fp32"]
    with pytest.raises(ConfigError, match=r"variant 'nope': .* not found; pick one of "
                       r"\['ort_fp32'\]"):
        run.variant("nope")
    (folder / "variants" / "ort_fp32" / "manifest.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="manifest.json: schema is not"):
        run.variant("ort_fp32")
    run.paths.report_json.write_text(json.dumps({**report_dict(), "title": 7}))
    with pytest.raises(ConfigError, match="report.json: not an infertune.report/v1 report: "
                       "title"):
        run.report(Report)
