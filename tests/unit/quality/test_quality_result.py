"""QualityResult round trips; evaluate_outputs refuses mismatched inputs in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from infertune.errors import DataError, IncompatibleInputError, QualityFloorError
from infertune.quality import QualityResult, evaluate_outputs
from infertune.quality.validate import preflight


def embedding_result() -> QualityResult:
    rng = np.random.default_rng(0)
    base = rng.standard_normal((40, 16))
    return evaluate_outputs(base, base + 0.05 * rng.standard_normal(base.shape), None,
                            "cosine>=0.99", "embedding", data_source="unit")


def test_result_round_trips_through_dict_and_file(tmp_path: Path) -> None:
    result = embedding_result()
    assert QualityResult.from_dict(result.to_dict()) == result
    path = result.save(tmp_path / "variant" / "quality.json")
    assert QualityResult.load(path) == result


def test_embedding_results_always_report_neighbour_agreement() -> None:
    result = embedding_result()
    names = [m.name for m in result.metrics]
    assert names == ["mean_cosine", "min_cosine", "knn_agreement@10", "spearman",
                     "max_abs_diff"]
    assert 0.0 < result.metric("knn_agreement@10").value < 1.0
    assert result.notes == ["no labels: every metric compares the variant with the "
                            "baseline's outputs"]


def test_load_refuses_other_json(tmp_path: Path) -> None:
    path = tmp_path / "quality.json"
    path.write_text('{"schema": "something/v9"}')
    with pytest.raises(DataError, match="not a quality result"):
        QualityResult.load(path)


def test_mismatched_inputs_are_one_line_errors() -> None:
    base = np.zeros((4, 3))
    with pytest.raises(IncompatibleInputError, match="shape"):
        evaluate_outputs(base, np.zeros((4, 2)), None, "max_abs_diff<=1", "other")
    with pytest.raises(DataError, match="accuracy is scored against labels"):
        evaluate_outputs(base, base, None, "accuracy drop<=0.01", "classification")
    with pytest.raises(QualityFloorError, match="mean_cosine does not apply to a classification"):
        evaluate_outputs(base, base, None, "cosine>=0.9", "classification")
    with pytest.raises(DataError, match="class indices 0..2"):
        evaluate_outputs(base, base, [0, 1, 2, 5], "accuracy drop<=0.01", "classification")
    with pytest.raises(DataError, match="must be numbers"):
        evaluate_outputs(base, base, ["cat"] * 4, "accuracy drop<=0.01", "classification")
    with pytest.raises(QualityFloorError, match="unknown task"):
        evaluate_outputs(base, base, None, "max_abs_diff<=1", "vision")


def test_preflight_checks_requested_metrics_too() -> None:
    assert preflight("cosine>=0.99", False, None, "embedding").metric == "mean_cosine"
    with pytest.raises(DataError, match="macro_f1 is scored against labels"):
        preflight("argmax_agreement>=0.9", False, ["macro_f1"], "classification")
