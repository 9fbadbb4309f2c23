"""Quality: task metrics, the paired-bootstrap floor gate, and drift checks.

    compare_quality(baseline, variant, data, "cosine>=0.99") -> QualityResult
    evaluate_outputs(baseline_outputs, variant_outputs, labels, floor, task) -> QualityResult
    parse_floor("accuracy drop<=1%") -> Floor;  floor_from_config(scenario_floor) -> Floor
    drift(reference_outputs, current_outputs, task) -> DriftResult
"""

from infertune.quality.drift import DriftResult, DriftThresholds, drift
from infertune.quality.floor import Floor, FloorCheck, floor_from_config, parse_floor
from infertune.quality.metrics import Metric, get_metric, known_names
from infertune.quality.validate import (
    QualityResult,
    compare_quality,
    evaluate_outputs,
    run_outputs,
)

__all__ = ["DriftResult", "DriftThresholds", "Floor", "FloorCheck", "Metric", "QualityResult",
           "compare_quality", "drift", "evaluate_outputs", "floor_from_config", "get_metric",
           "known_names", "parse_floor", "run_outputs"]
