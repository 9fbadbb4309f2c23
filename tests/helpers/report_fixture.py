"""A report.json as the Report schema reads it, with only the sections a test names filled in:
the required sections hold placeholder text, no figures (readers of a run folder read
report.json through RunDir.report(Report), which refuses a file the schema does not accept)."""

from __future__ import annotations

from typing import Any

from infertune.report.schema import Diagnosis, MeasurementPlan, Problem, Report


def report_dict(**sections: Any) -> dict[str, Any]:
    """``Report`` with ``sections`` (JSON values, e.g. recommendation={"variant_id": "x"}), as
    the dict report.json holds; validated, so a fixture cannot drift from the schema."""
    base = Report(title="test run", hardware="test machine",
                  problem=Problem(statement="s", latency_goal="l", throughput_goal="t",
                                  cost_goal="c"),
                  diagnosis=Diagnosis(summary="d"),
                  measurement_plan=MeasurementPlan(log_per_stage=[], compare_variants="c",
                                                   quality_and_drift="q")).to_dict()
    return Report.from_dict({**base, **sections}).to_dict()
