"""The floor grammar and the paired-bootstrap verdict (seeded)."""

from __future__ import annotations

import numpy as np
import pytest

from infertune.config import QualityFloor
from infertune.errors import QualityFloorError
from infertune.quality import evaluate_outputs
from infertune.quality.floor import Floor, floor_from_config, parse_floor


@pytest.mark.parametrize(("text", "floor"), [
    ("cosine>=0.99", Floor("mean_cosine", "bound", 0.99, op=">=")),
    (" mean_cosine >= 0.99 ", Floor("mean_cosine", "bound", 0.99, op=">=")),
    ("accuracy drop<=0.005", Floor("accuracy", "drop", 0.005)),
    ("accuracy drop<=1%", Floor("accuracy", "drop", 0.01, relative=True)),
    ("ndcg@10 drop <= 0.01", Floor("ndcg@10", "drop", 0.01)),
    ("max_abs_diff<=5e-2", Floor("max_abs_diff", "bound", 0.05, op="<=")),
    ("top5_accuracy>=.8", Floor("top_k_accuracy@5", "bound", 0.8, op=">=")),
])
def test_floor_grammar(text: str, floor: Floor) -> None:
    assert parse_floor(text) == floor
    assert parse_floor(floor.text()) == floor  # the canonical text parses back


@pytest.mark.parametrize(("text", "message"), [
    ("cosine > 0.99", "cannot read the quality floor"),
    ("bleu>=0.3", "unknown quality metric 'bleu'"),
    ("mae>=0.1", "lower mae is better, so its floor is 'mae<=X'"),
    ("accuracy<=0.9", "higher accuracy is better"),
    ("accuracy drop>=1%", "cannot read"),
])
def test_bad_floors_are_one_line_errors(text: str, message: str) -> None:
    with pytest.raises(QualityFloorError, match=message) as err:
        parse_floor(text)
    assert "\n" not in str(err.value)


def test_floor_from_scenario_config() -> None:
    assert floor_from_config(QualityFloor(metric="mean_cosine", min=0.99)) == \
        Floor("mean_cosine", "bound", 0.99)
    assert floor_from_config(QualityFloor(metric="ndcg@10", max_drop=0.005)) == \
        Floor("ndcg@10", "drop", 0.005)
    assert floor_from_config(QualityFloor(metric="accuracy", max_drop=0.01, relative=True)) \
        == Floor("accuracy", "drop", 0.01, relative=True)
    with pytest.raises(QualityFloorError, match="lower-is-better"):
        floor_from_config(QualityFloor(metric="mae", min=0.1))


def embeddings_at_cosines(cosines: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Baseline unit rows at spread angles (a constant baseline is refused as degenerate) and
    variant rows at exactly the given cosine to them."""
    angles = np.linspace(0.0, 1.0, len(cosines))
    turned = angles + np.arccos(np.clip(cosines, -1.0, 1.0))
    base = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    variant = np.stack([np.cos(turned), np.sin(turned)], axis=1)
    return base, variant


def test_identical_outputs_pass() -> None:
    rng = np.random.default_rng(1)
    base = rng.standard_normal((50, 16))
    result = evaluate_outputs(base, base.copy(), None, "cosine>=0.99", "embedding")
    assert result.verdict == "pass"
    assert result.floor_check.ci_low == pytest.approx(1.0)
    assert result.metric("knn_agreement@10").value == 1.0


def test_clearly_degraded_outputs_fail() -> None:
    base, variant = embeddings_at_cosines(np.full(50, 0.9))
    result = evaluate_outputs(base, variant, None, "cosine>=0.99", "embedding",
                              metrics=["mean_cosine"])
    assert result.verdict == "fail"
    assert result.floor_check.ci_high == pytest.approx(0.9)
    assert result.floor_check.more_examples is None


def test_borderline_with_few_examples_is_inconclusive_and_says_how_many_more() -> None:
    cosines = np.array([0.984, 0.998] * 5)  # mean 0.991, spread wide against a 0.99 floor
    base, variant = embeddings_at_cosines(cosines)
    result = evaluate_outputs(base, variant, None, "cosine>=0.99", "embedding",
                              metrics=["mean_cosine"])
    check = result.floor_check
    assert check.verdict == "inconclusive"
    assert check.ci_low < 0.99 < check.ci_high
    assert check.estimate == pytest.approx(0.991)
    half = check.estimate - check.ci_low
    assert check.more_examples == int(np.ceil(10 * (half / 0.001) ** 2)) - 10
    assert f"need ~{check.more_examples} more examples" in check.explanation
    # the estimate is where the CI just reaches the floor; twice that many examples of the
    # same spread decide it
    many = np.array([0.984, 0.998] * (check.more_examples + 10))
    assert evaluate_outputs(*embeddings_at_cosines(many), None, "cosine>=0.99", "embedding",
                            metrics=["mean_cosine"]).verdict == "pass"


def test_verdict_is_deterministic_for_a_seed() -> None:
    base, variant = embeddings_at_cosines(np.array([0.984, 0.998] * 5))
    one = evaluate_outputs(base, variant, None, "cosine>=0.99", "embedding", seed=3)
    two = evaluate_outputs(base, variant, None, "cosine>=0.99", "embedding", seed=3)
    assert one.to_dict() == two.to_dict()


def classifier_pair(flip: int, n: int = 200) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Baseline right on every example; the variant wrong on the first ``flip`` of them."""
    labels = np.arange(n) % 3
    base = np.eye(3)[labels] * 0.8 + 0.1
    variant = base.copy()
    variant[:flip] = np.eye(3)[(labels[:flip] + 1) % 3] * 0.8 + 0.1
    return base, variant, labels


def test_accuracy_drop_floor_uses_the_paired_difference() -> None:
    base, variant, labels = classifier_pair(flip=0)
    result = evaluate_outputs(base, variant, list(labels), "accuracy drop<=0.005",
                              "classification")
    assert result.verdict == "pass"
    acc = result.metric("accuracy")
    assert (acc.value, acc.baseline_value, acc.diff) == (1.0, 1.0, 0.0)
    base, variant, labels = classifier_pair(flip=40)  # a 20-point drop
    result = evaluate_outputs(base, variant, list(labels), "accuracy drop<=1%", "classification")
    assert result.verdict == "fail"
    assert result.floor_check.estimate == pytest.approx(0.2)
    assert result.metric("accuracy").diff == pytest.approx(-0.2)


def test_extreme_floor_is_judged_on_examples_seen() -> None:
    base, variant = embeddings_at_cosines(np.array([0.999] * 99 + [0.95]))
    failed = evaluate_outputs(base, variant, None, "min_cosine>=0.98", "embedding")
    assert failed.verdict == "fail"
    assert failed.floor_check.method == "observed extreme"
    assert "1 of 100 examples are beyond it" in failed.floor_check.explanation
    passed = evaluate_outputs(base, variant, None, "min_cosine>=0.9", "embedding")
    assert passed.verdict == "pass"
    assert "at most 3.00% of inputs" in passed.floor_check.explanation
    assert "unreliable" in passed.metric("min_cosine").note


def test_relative_drop_of_a_zero_baseline_is_refused() -> None:
    base, variant = embeddings_at_cosines(np.full(10, 0.99))
    with pytest.raises(QualityFloorError, match="relative drop of max_abs_diff is undefined"):
        evaluate_outputs(base, variant, None, "max_abs_diff drop<=1%", "embedding")
