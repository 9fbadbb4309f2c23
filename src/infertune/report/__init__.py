"""Report: the schema (infertune.report/v1), the provenance check, ranking, the advisor and its
knowledge base, and the md/html/json renderers. See schema.py for the layout of a Report."""

from infertune.report.provenance import assert_all_figures_have_provenance, provenance_problems
from infertune.report.render import FORMATS, render, write_report
from infertune.report.schema import (
    SCHEMA,
    Diagnosis,
    DiagnosisItem,
    Figure,
    Impact,
    MeasurementPlan,
    MissingFact,
    Option,
    Percentiles,
    PlanStep,
    PlotData,
    PolicyRow,
    Problem,
    QualitySpeedPoint,
    Rated,
    Recommendation,
    Report,
    Series,
    StageGroup,
    StageTime,
    VariantRow,
)

__all__ = [
    "FORMATS", "SCHEMA", "Diagnosis", "DiagnosisItem", "Figure", "Impact", "MeasurementPlan",
    "MissingFact", "Option", "Percentiles", "PlanStep", "PlotData", "PolicyRow", "Problem",
    "QualitySpeedPoint", "Rated", "Recommendation", "Report", "Series", "StageGroup",
    "StageTime", "VariantRow", "assert_all_figures_have_provenance", "provenance_problems",
    "render", "write_report",
]
