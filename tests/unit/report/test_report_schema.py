"""Report schema: Figure rules, round trips, and the provenance checker (which must fail on a
bare number, a bad source and an empty basis)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from infertune.errors import ConfigError
from infertune.report.provenance import assert_all_figures_have_provenance, provenance_problems
from infertune.report.schema import SCHEMA, Figure, Report


def test_figure_needs_value_or_full_range() -> None:
    with pytest.raises(ValidationError):
        Figure(unit="ms", source="estimate", basis="x")
    with pytest.raises(ValidationError):
        Figure(low=1, unit="ms", source="estimate", basis="x")
    with pytest.raises(ValidationError):
        Figure(value=1, low=1, high=2, unit="ms", source="estimate", basis="x")
    with pytest.raises(ValidationError):
        Figure(low=3, high=2, unit="ms", source="estimate", basis="x")
    with pytest.raises(ValidationError):
        Figure(value=1, unit="ms", source="guess", basis="x")
    with pytest.raises(ValidationError):
        Figure(value=1, unit="ms", source="measured", basis="")


def test_figure_constructors_say_where_from() -> None:
    m = Figure.measured(12.5, "ms", "2-core EPYC", 400, artifact="profile.json")
    assert (m.value, m.source, m.samples) == (12.5, "measured", 400)
    assert m.artifact == "profile.json" and m.inputs == []
    assert m.basis == "measured on 2-core EPYC with 400 samples"
    e = Figure.estimate(-60, -30, "%", "NVIDIA T4 datasheet")
    assert (e.low, e.high, e.mid, e.source) == (-60, -30, -45, "estimate")
    assert e.basis == "estimate from NVIDIA T4 datasheet"


def test_advice_report_round_trips_through_json(tmp_path, measured_report) -> None:
    path = measured_report.save_json(tmp_path / "run" / "report.json")
    data = json.loads(path.read_text())
    assert data["schema"] == SCHEMA
    again = Report.load_json(path)
    assert again == Report.from_dict(measured_report.to_dict())
    assert again.to_dict() == data


def test_provenance_holds_for_advice_and_measured_reports(measured_report) -> None:
    assert_all_figures_have_provenance(measured_report.to_dict())
    assert provenance_problems(measured_report.to_dict()) == []


def test_provenance_checker_catches_every_kind_of_gap(measured_report) -> None:
    data = measured_report.to_dict()
    data["variants"][0]["latency"]["p50"]["source"] = "guess"
    data["options"][0]["impact"]["p95"]["basis"] = " "
    data["diagnosis"]["bare"] = 12.5
    data["notes"].append(3)
    problems = provenance_problems(data)
    assert len(problems) == 4, problems
    assert any("$.diagnosis.bare = 12.5" in p for p in problems)
    assert any("$.notes[1] = 3" in p for p in problems)
    with pytest.raises(AssertionError, match="4 figure"):
        assert_all_figures_have_provenance(data)


def test_settings_are_configuration_not_figures(measured_report) -> None:
    data = measured_report.to_dict()
    assert data["policies"][0]["settings"]["max_batch_size"] == 8
    assert provenance_problems(data) == []
    data["policies"][0]["workers"] = 2  # a bare number outside settings is a problem
    assert len(provenance_problems(data)) == 1


def test_wrong_schema_or_garbage_is_one_line_error(tmp_path, measured_report) -> None:
    data = measured_report.to_dict()
    data["schema"] = "infertune.report/v0"
    with pytest.raises(ConfigError, match="not an infertune.report/v1 report"):
        Report.from_dict(data)
    bad = tmp_path / "report.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        Report.load_json(bad)
    with pytest.raises(ConfigError, match="not found"):
        Report.load_json(tmp_path / "missing.json")
