"""Metrics on hand-computed cases, and metric-name parsing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infertune.errors import QualityFloorError
from infertune.quality.metrics import default_metrics, for_list_outputs, get_metric

PROBS = np.array([[0.9, 0.1, 0.0], [0.2, 0.5, 0.3], [0.6, 0.4, 0.0], [0.1, 0.3, 0.6]])
LABELS = np.array([0, 1, 1, 1])


def score(name: str, outputs: np.ndarray, reference: np.ndarray | None = None,
          labels: np.ndarray | None = None) -> float:
    ref = outputs if reference is None else reference
    return get_metric(name).value(outputs, ref, labels)


def test_classification_metrics_on_a_hand_computed_case() -> None:
    # argmax: [0, 1, 0, 2] against labels [0, 1, 1, 1]
    assert score("accuracy", PROBS, labels=LABELS) == 0.5
    # top 2 of each row: {0,1}, {1,2}, {0,1}, {2,1} -> all contain the label
    assert score("top_k_accuracy@2", PROBS, labels=LABELS) == 1.0
    assert score("top1_accuracy", PROBS, labels=LABELS) == 0.5
    # class 0: tp 1, predicted 2, true 1 -> 2/3; class 1: tp 1, predicted 1, true 3 -> 1/2;
    # class 2: tp 0, predicted 1, true 0 -> 0
    assert score("macro_f1", PROBS, labels=LABELS) == pytest.approx((2 / 3 + 1 / 2 + 0) / 3)
    other = PROBS[[0, 1, 3, 3]]  # argmax [0, 1, 2, 2] vs baseline [0, 1, 0, 2]
    assert score("argmax_agreement", other, PROBS) == 0.75


def test_regression_metrics() -> None:
    outputs, labels = np.array([[1.0], [2.0], [4.0]]), np.array([1.0, 3.0, 2.0])
    assert score("mae", outputs, labels=labels) == 1.0
    assert score("rmse", outputs, labels=labels) == pytest.approx(math.sqrt(5 / 3))


def test_cosine_metrics() -> None:
    base = np.array([[1.0, 0.0], [0.0, 1.0]])
    variant = np.array([[2.0, 0.0], [1.0, 1.0]])  # scale does not matter; 45 degrees -> 0.7071
    assert score("mean_cosine", variant, base) == pytest.approx((1 + 1 / math.sqrt(2)) / 2)
    assert score("cosine", variant, base) == score("mean_cosine", variant, base)
    assert score("min_cosine", variant, base) == pytest.approx(1 / math.sqrt(2))
    assert score("mean_cosine", base, base) == 1.0


def test_knn_agreement_counts_shared_neighbours() -> None:
    # baseline: points 0,1 close together and 2,3 close together
    base = np.array([[1.0, 0.0], [0.99, 0.14], [0.0, 1.0], [0.14, 0.99]])
    assert score("knn_agreement@1", base, base) == 1.0
    # variant moves point 1 next to point 3, and point 3 nearer to 1 than to 2
    variant = np.array([[1.0, 0.0], [0.2, 0.98], [0.0, 1.0], [0.19, 0.98]])
    # nearest: base 0->1, 1->0, 2->3, 3->2; variant 0->1, 1->3, 2->3, 3->1
    assert score("knn_agreement@1", variant, base) == 0.5
    # k larger than n-1 is capped: every other point is a neighbour of every point
    assert score("knn_agreement@10", variant, base) == 1.0


def test_spearman_of_pairwise_similarities() -> None:
    rng = np.random.default_rng(0)
    base = rng.standard_normal((20, 8))
    assert score("spearman", base, base) == 1.0
    assert score("spearman", base * 3.0, base) == pytest.approx(1.0)  # cosine ignores scale
    assert score("spearman", rng.standard_normal((20, 8)), base) < 0.5


def test_ndcg_and_rank_agreement() -> None:
    scores, rel = np.array([[3.0, 2.0, 1.0]]), np.array([[0.0, 1.0, 2.0]])
    # dcg = 0/log2(2) + 1/log2(3) + 2/log2(4); ideal = 2/log2(2) + 1/log2(3)
    expected = (1 / math.log2(3) + 1.0) / (2.0 + 1 / math.log2(3))
    assert score("ndcg@3", scores, labels=rel) == pytest.approx(expected)
    assert score("ndcg@1", scores, labels=rel) == 0.0
    reversed_ = scores[:, ::-1]
    assert score("rank_agreement", reversed_, scores) == pytest.approx(-1.0)
    flat = for_list_outputs(get_metric("ndcg@3"))  # one score per example: one ranked list
    assert flat.value(scores[0], scores[0], rel[0]) == pytest.approx(expected)


def test_max_differences() -> None:
    base = np.array([[1.0, -2.0, 0.0], [4.0, 0.5, 2.0]])
    variant = np.array([[1.1, -2.0, 0.0], [4.0, 0.5, 1.0]])
    assert score("max_abs_diff", variant, base) == pytest.approx(1.0)
    assert score("max_rel_diff", variant, base) == pytest.approx(0.5)  # |1-2|/2


@pytest.mark.parametrize(("name", "canonical"), [
    ("ndcg@10", "ndcg@10"), ("ndcg", "ndcg@10"), ("knn_agreement@5", "knn_agreement@5"),
    ("knn_agreement", "knn_agreement@10"), ("top5_accuracy", "top_k_accuracy@5"),
    ("top_k_accuracy@3", "top_k_accuracy@3"), ("cosine", "mean_cosine"),
    ("Mean_Cosine", "mean_cosine"),
])
def test_names_parse_to_canonical_metrics(name: str, canonical: str) -> None:
    assert get_metric(name).name == canonical


def test_unknown_metric_lists_the_known_ones() -> None:
    with pytest.raises(QualityFloorError, match="unknown quality metric 'bleu'.*mean_cosine"):
        get_metric("bleu")
    with pytest.raises(QualityFloorError, match="takes no '@k'"):
        get_metric("accuracy@3")
    with pytest.raises(QualityFloorError, match="k must be >= 1"):
        get_metric("ndcg@0")


def test_default_metrics_skip_label_metrics_without_labels() -> None:
    assert default_metrics("classification", has_labels=False) == ["argmax_agreement",
                                                                   "max_abs_diff"]
    assert "knn_agreement@10" in default_metrics("embedding", has_labels=False)
    assert default_metrics("ranking", has_labels=True)[0] == "ndcg@10"
