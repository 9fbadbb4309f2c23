"""A baseline whose outputs do not vary is refused before any comparison: a constant agrees
with itself, so every quality gate would pass on a useless model."""

from __future__ import annotations

import numpy as np
import pytest

from infertune.quality import evaluate_outputs
from infertune.quality.degenerate import (
    DegenerateOutputsError,
    check_outputs_vary,
    varying_dimensions,
)


def test_a_softmax_over_one_logit_is_refused_with_its_cause() -> None:
    ones = np.ones((20, 1))  # what softmax([logit]) gives for every input
    with pytest.raises(DegenerateOutputsError, match="softmax over a single logit") as err:
        evaluate_outputs(ones, ones, None, "max_abs_diff<=0.1", "classification")
    assert "\n" not in str(err.value) and "all 20 held-out inputs" in str(err.value)


def test_near_constant_outputs_are_refused_and_small_real_variation_is_not() -> None:
    rng = np.random.default_rng(0)
    float32_noise = 0.25 + 1e-9 * rng.standard_normal((30, 1))
    with pytest.raises(DegenerateOutputsError, match="inputs are \\[query, passage\\] pairs"):
        check_outputs_vary(float32_noise, "reranking")
    check_outputs_vary(0.25 + 1e-4 * rng.standard_normal((30, 1)), "reranking")  # no raise


def test_one_varying_dimension_is_enough() -> None:
    outputs = np.zeros((10, 4))
    outputs[:, 2] = np.arange(10)
    assert varying_dimensions(outputs).tolist() == [False, False, True, False]
    check_outputs_vary(outputs, "embedding")


def test_equal_inputs_may_give_equal_outputs() -> None:
    same = np.ones((5, 3))
    check_outputs_vary(same, "embedding", inputs=["hello"] * 5)  # one distinct input: skipped
    with pytest.raises(DegenerateOutputsError):
        check_outputs_vary(same, "embedding", inputs=["hello", "world"] * 2 + ["x"])
