"""Cascade threshold sweep on hand-made outputs, and right-sizing arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from infertune.optimize.served.cascade_eval import (
    CascadeNotApplicable,
    CascadeResult,
    RightSizing,
    evaluate_cascade,
    right_size,
)
from infertune.serve.cascade import Cascade, confidence
from infertune.serve.testing import GatedAdapter


def probs(rows: list[tuple[float, float]]) -> np.ndarray:
    return np.asarray(rows, dtype=np.float64)


def test_thresholds_trade_escalation_for_agreement() -> None:
    # candidate: confident and right on 0,1; unsure and wrong on 2,3
    cand = probs([(0.95, 0.05), (0.1, 0.9), (0.55, 0.45), (0.6, 0.4)])
    base = probs([(0.9, 0.1), (0.2, 0.8), (0.3, 0.7), (0.2, 0.8)])
    c_ms = [2.0] * 10
    b_ms = [10.0] * 10
    result = evaluate_cascade("classification", cand, base, c_ms, b_ms,
                              labels=[0, 1, 1, 1], thresholds=(0.5, 0.7, 0.99))
    by_t = {p.threshold: p for p in result.points}
    assert by_t[0.5].escalated_share == 0.0 and by_t[0.5].agreement == 0.5
    assert by_t[0.7].escalated_share == 0.5 and by_t[0.7].agreement == 1.0
    assert by_t[0.7].accuracy == 1.0
    assert by_t[0.99].escalated_share == 1.0
    # latency: escalated requests pay both models (2 + 10 ms), the rest the candidate's 2 ms
    assert by_t[0.5].p50_ms == pytest.approx(2.0)
    assert by_t[0.99].p50_ms == pytest.approx(12.0)
    assert result.candidate_alone.agreement == 0.5
    assert result.best_within(0.99).threshold == 0.7
    assert CascadeResult.from_dict(result.to_dict()).to_dict() == result.to_dict()


def test_embeddings_do_not_cascade() -> None:
    emb = np.ones((3, 4))
    with pytest.raises(CascadeNotApplicable, match="different vector spaces"):
        evaluate_cascade("embedding", emb, emb, [1.0], [2.0])


def test_thresholds_mean_what_serve_reads() -> None:
    """A threshold optimize picks is compared with the very confidence serve's cascade computes
    (one function): serve answers with the fast model exactly where the sweep counted it."""
    cand = probs([(0.95, 0.05), (0.1, 0.9), (0.55, 0.45), (0.6, 0.4)])
    result = evaluate_cascade("classification", cand, cand, [2.0] * 4, [10.0] * 4,
                              thresholds=(0.7,))
    served = Cascade(GatedAdapter(), threshold=0.7).confident(list(cand), "standard")
    assert served == [True, True, False, False]
    assert result.points[0].escalated_share == served.count(False) / len(served)
    # a reranker's single logit: sigmoid(2.0) = 0.881 clears 0.8, sigmoid(-0.5) = 0.378 gives
    # max(p, 1 - p) = 0.622, which does not
    assert confidence(np.asarray([2.0]), "probability", "reranking") == pytest.approx(0.8808, 1e-3)
    scores = np.asarray([[2.0], [-0.5]])
    ranked = evaluate_cascade("reranking", scores, scores, [1.0] * 2, [2.0] * 2,
                              thresholds=(0.8,))
    assert ranked.points[0].escalated_share == 0.5


def test_logits_are_not_a_confidence() -> None:
    logits = probs([(3.0, -1.0), (0.5, 0.2)])  # not a softmax: serve would read no confidence
    with pytest.raises(CascadeNotApplicable, match="not probability vectors"):
        evaluate_cascade("classification", logits, logits, [1.0], [2.0])


def test_right_size_for_peak() -> None:
    rs = right_size(peak_rps=250.0, goodput_per_instance=60.0, cores_per_instance=2,
                    cost_per_hour_usd=0.1)
    assert (rs.instances, rs.cores) == (5, 10)
    assert rs.cost_per_hour_usd == pytest.approx(0.5)
    assert RightSizing.from_dict(rs.to_dict()) == rs
    assert right_size(10.0, 0.0, 2, 0.1) is None
