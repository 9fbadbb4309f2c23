"""The quality artifacts round-trip through JSON by the one serialisation (Serial), and write
exactly the dict the hand-written to_dict wrote before (the OLD_* literals were captured by
running that code on these instances), so files written then still load."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infertune.quality.bootstrap import MetricValue
from infertune.quality.drift import DriftResult, DriftThresholds, SummaryDrift
from infertune.quality.floor import Floor, FloorCheck
from infertune.quality.validate import QualityResult

METRIC = MetricValue(
    "mean_cosine",
    "baseline",
    True,
    0.995,
    0.99,
    0.998,
    1.0,
    diff=-0.005,
    diff_ci_low=-0.01,
    diff_ci_high=-0.002,
    resamples=500,
    note="paired",
)
LABEL_METRIC = MetricValue("accuracy", "labels", True, 0.9, 0.85, 0.95, 0.91)
THRESHOLDS = DriftThresholds(psi_moderate=0.2, psi_major=0.3, ks_alpha=0.05, bins=8)
DRIFT = DriftResult(
    "moderate",
    [
        SummaryDrift("norm", "continuous", "stable", 0.01, 0.05, 0.5),
        SummaryDrift("class", "categorical", "moderate", 0.15, note="PSI only"),
    ],
    n_reference=100,
    n_current=90,
    thresholds=THRESHOLDS,
)
BOUND = Floor("mean_cosine", "bound", 0.99, op=">=")
DROP = Floor("accuracy", "drop", 0.01, relative=True)
CHECK = FloorCheck(
    DROP,
    "relative drop of accuracy",
    0.004,
    -0.002,
    0.009,
    "pass",
    "paired bootstrap",
    "the drop's CI lies below 1%",
    more_examples=120,
)
QUALITY = QualityResult(
    "pass",
    CHECK,
    [METRIC, LABEL_METRIC],
    "classification",
    200,
    True,
    baseline="torch-fp32",
    variant="ort-int8",
    data_source="held.jsonl",
    seed=3,
    resamples=500,
    drift=DRIFT,
    notes=["a note"],
)
BARE_QUALITY = QualityResult(
    "fail",
    FloorCheck(BOUND, "mean_cosine", 0.9, 0.88, 0.92, "fail", "observed extreme", "below"),
    [METRIC],
    "embedding",
    10,
    False,
)

OLD_METRIC = {
    "name": "mean_cosine",
    "vs": "baseline",
    "higher_is_better": True,
    "value": 0.995,
    "ci_low": 0.99,
    "ci_high": 0.998,
    "baseline_value": 1.0,
    "diff": -0.005,
    "diff_ci_low": -0.01,
    "diff_ci_high": -0.002,
    "resamples": 500,
    "note": "paired",
}
OLD_LABEL_METRIC = {
    "name": "accuracy",
    "vs": "labels",
    "higher_is_better": True,
    "value": 0.9,
    "ci_low": 0.85,
    "ci_high": 0.95,
    "baseline_value": 0.91,
    "diff": None,
    "diff_ci_low": None,
    "diff_ci_high": None,
    "resamples": 0,
    "note": None,
}
OLD_THRESHOLDS = {"psi_moderate": 0.2, "psi_major": 0.3, "ks_alpha": 0.05, "bins": 8}
OLD_DRIFT = {
    "verdict": "moderate",
    "n_reference": 100,
    "n_current": 90,
    "thresholds": {"psi_moderate": 0.2, "psi_major": 0.3, "ks_alpha": 0.05, "bins": 8},
    "summaries": [
        {
            "name": "norm",
            "kind": "continuous",
            "verdict": "stable",
            "psi": 0.01,
            "ks_statistic": 0.05,
            "ks_pvalue": 0.5,
            "note": None,
        },
        {
            "name": "class",
            "kind": "categorical",
            "verdict": "moderate",
            "psi": 0.15,
            "ks_statistic": None,
            "ks_pvalue": None,
            "note": "PSI only",
        },
    ],
}
OLD_BOUND = {
    "metric": "mean_cosine",
    "kind": "bound",
    "threshold": 0.99,
    "op": ">=",
    "relative": False,
}
OLD_DROP = {"metric": "accuracy", "kind": "drop", "threshold": 0.01, "op": ">=", "relative": True}
OLD_CHECK = {
    "floor": {
        "metric": "accuracy",
        "kind": "drop",
        "threshold": 0.01,
        "op": ">=",
        "relative": True,
    },
    "quantity": "relative drop of accuracy",
    "estimate": 0.004,
    "ci_low": -0.002,
    "ci_high": 0.009,
    "verdict": "pass",
    "method": "paired bootstrap",
    "explanation": "the drop's CI lies below 1%",
    "more_examples": 120,
}
OLD_QUALITY = {
    "schema": "infertune.quality/v1",
    "verdict": "pass",
    "floor_check": {
        "floor": {
            "metric": "accuracy",
            "kind": "drop",
            "threshold": 0.01,
            "op": ">=",
            "relative": True,
        },
        "quantity": "relative drop of accuracy",
        "estimate": 0.004,
        "ci_low": -0.002,
        "ci_high": 0.009,
        "verdict": "pass",
        "method": "paired bootstrap",
        "explanation": "the drop's CI lies below 1%",
        "more_examples": 120,
    },
    "metrics": [
        {
            "name": "mean_cosine",
            "vs": "baseline",
            "higher_is_better": True,
            "value": 0.995,
            "ci_low": 0.99,
            "ci_high": 0.998,
            "baseline_value": 1.0,
            "diff": -0.005,
            "diff_ci_low": -0.01,
            "diff_ci_high": -0.002,
            "resamples": 500,
            "note": "paired",
        },
        {
            "name": "accuracy",
            "vs": "labels",
            "higher_is_better": True,
            "value": 0.9,
            "ci_low": 0.85,
            "ci_high": 0.95,
            "baseline_value": 0.91,
            "diff": None,
            "diff_ci_low": None,
            "diff_ci_high": None,
            "resamples": 0,
            "note": None,
        },
    ],
    "task": "classification",
    "n_examples": 200,
    "has_labels": True,
    "baseline": "torch-fp32",
    "variant": "ort-int8",
    "data_source": "held.jsonl",
    "seed": 3,
    "resamples": 500,
    "drift": {
        "verdict": "moderate",
        "n_reference": 100,
        "n_current": 90,
        "thresholds": {"psi_moderate": 0.2, "psi_major": 0.3, "ks_alpha": 0.05, "bins": 8},
        "summaries": [
            {
                "name": "norm",
                "kind": "continuous",
                "verdict": "stable",
                "psi": 0.01,
                "ks_statistic": 0.05,
                "ks_pvalue": 0.5,
                "note": None,
            },
            {
                "name": "class",
                "kind": "categorical",
                "verdict": "moderate",
                "psi": 0.15,
                "ks_statistic": None,
                "ks_pvalue": None,
                "note": "PSI only",
            },
        ],
    },
    "notes": ["a note"],
}
OLD_BARE_QUALITY = {
    "schema": "infertune.quality/v1",
    "verdict": "fail",
    "floor_check": {
        "floor": {
            "metric": "mean_cosine",
            "kind": "bound",
            "threshold": 0.99,
            "op": ">=",
            "relative": False,
        },
        "quantity": "mean_cosine",
        "estimate": 0.9,
        "ci_low": 0.88,
        "ci_high": 0.92,
        "verdict": "fail",
        "method": "observed extreme",
        "explanation": "below",
        "more_examples": None,
    },
    "metrics": [
        {
            "name": "mean_cosine",
            "vs": "baseline",
            "higher_is_better": True,
            "value": 0.995,
            "ci_low": 0.99,
            "ci_high": 0.998,
            "baseline_value": 1.0,
            "diff": -0.005,
            "diff_ci_low": -0.01,
            "diff_ci_high": -0.002,
            "resamples": 500,
            "note": "paired",
        }
    ],
    "task": "embedding",
    "n_examples": 10,
    "has_labels": False,
    "baseline": "baseline",
    "variant": "variant",
    "data_source": "",
    "seed": 0,
    "resamples": 1000,
    "drift": None,
    "notes": [],
}

CASES: list[Any] = [
    METRIC,
    LABEL_METRIC,
    THRESHOLDS,
    DRIFT.summaries[0],
    DRIFT,
    BOUND,
    DROP,
    CHECK,
    QUALITY,
    BARE_QUALITY,
]


@pytest.mark.parametrize("obj", CASES, ids=lambda o: type(o).__name__)
def test_round_trip_through_json(obj: Any) -> None:
    assert type(obj).from_dict(json.loads(json.dumps(obj.to_dict()))) == obj


OLD: list[tuple[Any, dict[str, Any]]] = [
    (METRIC, OLD_METRIC),
    (LABEL_METRIC, OLD_LABEL_METRIC),
    (THRESHOLDS, OLD_THRESHOLDS),
    (DRIFT, OLD_DRIFT),
    (BOUND, OLD_BOUND),
    (DROP, OLD_DROP),
    (CHECK, OLD_CHECK),
    (QUALITY, OLD_QUALITY),
    (BARE_QUALITY, OLD_BARE_QUALITY),
]


@pytest.mark.parametrize(("obj", "old"), OLD, ids=lambda o: type(o).__name__)
def test_writes_and_reads_what_the_hand_written_code_wrote(obj: Any, old: dict[str, Any]) -> None:
    assert obj.to_dict() == old
    assert type(obj).from_dict(old) == obj
