"""advise --measure: not built yet; see add_measurements."""

from __future__ import annotations

from infertune.config import Scenario
from infertune.errors import NotBuiltError
from infertune.report.schema import Report


def add_measurements(report: Report, scenario: Scenario, model: str) -> Report:
    raise NotBuiltError("advise --measure is not available yet; run infertune advise without it")
