"""`infertune optimize`'s summary, printed from the typed report that api.optimize returns."""

from __future__ import annotations

from pathlib import Path

from export_run import report

from infertune.cli.api import OptimizeResult
from infertune.cli.optimize import _fig, _summary
from infertune.report.schema import Figure


def test_the_summary_names_the_variants_the_policy_and_the_recommendation(
        tmp_path: Path, capsys) -> None:
    typed = report("ort_int8_dynamic_per_channel")
    typed = typed.model_copy(update={"notes": ["not measured: throughput", "other note"]})
    _summary(OptimizeResult(tmp_path, typed))
    out = capsys.readouterr().out
    lines = [line.strip() for line in out.splitlines()]
    assert lines[0] == "s"  # the problem statement
    assert "serving policy: p3" in lines
    assert "recommendation: ort_int8_dynamic_per_channel —" in lines
    assert "not measured: throughput" in lines and "other note" not in out
    assert f"report: {(tmp_path / 'report.html').resolve()}" in out.replace("\n", "")
    row = next(line for line in lines if "ort_int8_dynamic" in line and "│" in line)
    assert [cell.strip() for cell in row.strip("│").split("│")][4:] == ["n/a", "unknown"]


def test_a_figure_prints_its_value_or_its_interval() -> None:
    assert _fig(None) == "n/a"
    assert _fig(Figure(value=12.3456, unit="ms", source="measured", basis="b")) == "12.35"
    assert _fig(Figure(low=1.234, high=5.678, unit="ms", source="estimate", basis="b")) == (
        "1.23..5.68")
