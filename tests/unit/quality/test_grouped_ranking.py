"""Reranking quality per query: NDCG@10, MRR@10 and rank agreement computed within each query's
group of (query, passage) rows, with the paired bootstrap over queries, not rows."""

from __future__ import annotations

import numpy as np
import pytest

from infertune.errors import QualityFloorError
from infertune.quality import evaluate_outputs
from infertune.quality.metrics import QueryGroups, for_groups, get_metric


def _set(n_queries: int, per: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    labels = np.tile([3, 2, 1, 0, 0][:per], n_queries).astype(float)
    scores = labels + 0.3 * rng.standard_normal(len(labels))
    groups = [f"q{i}" for i in range(n_queries) for _ in range(per)]
    return scores, labels, groups


def test_ndcg_and_mrr_are_per_query_exact() -> None:
    # query a: the relevant passage ranked second; query b: ranked first
    scores = np.array([0.9, 0.5, 0.1, 0.2, 0.8])
    labels = np.array([0.0, 1.0, 0.0, 0.0, 1.0])
    groups = QueryGroups.of(["a", "a", "a", "b", "b"])
    mrr = for_groups(get_metric("mrr@10"), groups, labels)
    assert mrr.per_example is not None and mrr.units == 2
    np.testing.assert_allclose(mrr.per_example(scores, scores, labels), [0.5, 1.0])
    ndcg = for_groups(get_metric("ndcg@10"), groups, labels)
    assert ndcg.per_example is not None
    np.testing.assert_allclose(ndcg.per_example(scores, scores, labels),
                               [1 / np.log2(3), 1.0])


def test_bootstrap_resamples_queries_not_rows() -> None:
    scores, labels, groups = _set(40, 5)
    result = evaluate_outputs(scores, scores + 0.01, list(labels), "ndcg@10 drop<=0.02",
                              "reranking", groups=groups)
    ndcg = result.metric("ndcg@10")
    assert result.verdict == "pass" and ndcg.value == ndcg.baseline_value
    assert "over 40 queries" in result.floor_check.explanation  # resampled by query, not row
    assert {m.name for m in result.metrics} == {"ndcg@10", "mrr@10", "rank_agreement",
                                                "max_abs_diff"}
    assert result.metric("rank_agreement").value == pytest.approx(1.0)


def test_a_reordering_within_queries_fails_and_a_shift_across_them_does_not() -> None:
    scores, labels, groups = _set(40, 5, seed=1)
    shifted = scores + np.repeat(np.arange(40.0), 5)  # each query moved: order within kept
    assert evaluate_outputs(scores, shifted, list(labels), "ndcg@10 drop<=0.01", "reranking",
                            groups=groups).verdict == "pass"
    # as one ranked list the same shift scrambles the ordering: the old, wrong reading
    assert evaluate_outputs(scores, shifted, list(labels), "ndcg@10 drop<=0.01",
                            "reranking").verdict == "fail"
    reversed_within = np.concatenate([-scores[i:i + 5] for i in range(0, 200, 5)])
    result = evaluate_outputs(scores, reversed_within, list(labels), "ndcg@10 drop<=0.01",
                              "reranking", groups=groups)
    assert result.verdict == "fail" and result.metric("rank_agreement").value < 0


def test_rank_agreement_needs_no_labels_and_skips_single_passage_queries() -> None:
    scores = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    groups = ["a", "a", "b", "b", "c"]
    result = evaluate_outputs(scores, scores * 2, None, "rank_agreement>=0.9", "reranking",
                              groups=groups)
    assert result.verdict == "pass"
    assert result.metric("rank_agreement").value == pytest.approx(1.0)
    agreement = for_groups(get_metric("rank_agreement"), QueryGroups.of(groups), None)
    assert agreement.units == 2 and "2 of 3 queries" in agreement.description


def test_no_relevant_passage_anywhere_is_a_one_line_error() -> None:
    scores = np.array([0.1, 0.2, 0.3, 0.4])
    with pytest.raises(QualityFloorError, match="a relevant passage"):
        evaluate_outputs(scores, scores, [0, 0, 0, 0], "ndcg@10 drop<=0.01", "reranking",
                         groups=["a", "a", "b", "b"])
