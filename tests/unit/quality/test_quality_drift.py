"""PSI and KS flag a shifted distribution and not an identical one (seeded)."""

from __future__ import annotations

import numpy as np
import pytest

from infertune.quality.drift import DriftResult, drift, ks_test, psi, psi_categorical


def test_psi_and_ks_of_identical_samples() -> None:
    values = np.random.default_rng(0).standard_normal(2000)
    assert psi(values, values.copy()) == 0.0
    stat, pvalue = ks_test(values, values.copy())
    assert stat == 0.0 and pvalue == 1.0


def test_psi_and_ks_flag_a_shift_and_not_a_fresh_sample() -> None:
    rng = np.random.default_rng(0)
    reference = rng.standard_normal(2000)
    same = rng.standard_normal(2000)  # same distribution, new draw
    shifted = rng.standard_normal(2000) + 1.0
    assert psi(reference, same) < 0.1
    assert ks_test(reference, same)[1] > 0.01
    assert psi(reference, shifted) > 0.25
    assert ks_test(reference, shifted)[1] < 1e-6


def test_psi_of_a_known_categorical_shift() -> None:
    reference = np.array([0] * 50 + [1] * 50)
    current = np.array([0] * 25 + [1] * 75)
    # (0.25-0.5)ln(0.25/0.5) + (0.75-0.5)ln(0.75/0.5)
    expected = -0.25 * np.log(0.5) + 0.25 * np.log(1.5)
    assert psi_categorical(reference, current) == pytest.approx(expected)


def test_drift_verdicts_for_embeddings_and_classifiers() -> None:
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((500, 32))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    stable = drift(emb, emb.copy(), "embedding")
    assert stable.verdict == "stable"
    norm = next(s for s in stable.summaries if s.name == "norm")
    assert norm.psi is None and "constant" in norm.note  # unit norms cannot be binned
    moved = emb + 0.3 * rng.standard_normal(32)  # every embedding pushed one way
    assert drift(emb, moved, "embedding").verdict == "shifted"

    probs = np.tile([0.7, 0.2, 0.1], (300, 1)) + rng.uniform(0, 0.1, (300, 3))
    flipped = probs[:, ::-1]
    result = drift(probs, flipped, "classification")
    assert result.verdict == "shifted"
    assert next(s for s in result.summaries if s.name == "predicted_class").psi > 0.25
    assert drift(probs, probs.copy(), "classification").verdict == "stable"


def test_drift_result_round_trips() -> None:
    rng = np.random.default_rng(0)
    result = drift(rng.standard_normal((100, 1)), rng.standard_normal((80, 1)) + 2, "regression")
    assert result.n_current == 80
    assert DriftResult.from_dict(result.to_dict()) == result
