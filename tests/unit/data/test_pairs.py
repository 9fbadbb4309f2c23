"""Held-out pairs: {query, passage, label} rows (and pairs spelled as inputs) read as TextPairs
grouped by query; whole groups kept together when a subset is taken."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infertune.data import read_heldout, reranking_heldout
from infertune.data.text_inputs import TextPair
from infertune.errors import DataError


def _write(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_query_passage_rows_are_grouped_by_query(tmp_path: Path) -> None:
    data = read_heldout(_write(tmp_path / "d.jsonl", [
        {"query": "q1", "passage": "a", "label": 2}, {"query": "q2", "passage": "b", "label": 0},
        {"query": "q1", "passage": "c", "label": 0}]))
    assert data.inputs == [TextPair("q1", "a"), TextPair("q2", "b"), TextPair("q1", "c")]
    assert data.labels == [2, 0, 0]
    assert data.groups == ["query:q1", "query:q2", "query:q1"]


def test_pairs_spelled_as_inputs_and_explicit_groups(tmp_path: Path) -> None:
    data = read_heldout(_write(tmp_path / "d.jsonl", [
        {"input": ["q", "p"], "group": 7}, {"input": {"text": "q", "text_pair": "r"}, "group": 7},
        {"input": {"query": "z", "passage": "w"}, "group": 8}]))
    assert data.inputs == [TextPair("q", "p"), TextPair("q", "r"), TextPair("z", "w")]
    assert data.groups == ["7", "7", "8"]


def test_csv_pairs(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("query,passage,label\nq1,a,1\nq1,b,0\n")
    data = read_heldout(path)
    assert data.inputs == [TextPair("q1", "a"), TextPair("q1", "b")]
    assert data.labels == ["1", "0"] and data.groups == ["query:q1", "query:q1"]


@pytest.mark.parametrize(("rows", "message"), [
    ([{"query": "q"}], "row 1 needs 'query' and 'passage' as strings"),
    ([{"query": "q", "passage": " "}], "row 1 has an empty query or passage"),
    ([{"input": {"query": "q", "passage": 1}}], "must both be strings"),
    ([{"input": "text"}, {"query": "q", "passage": "p"}], "row 2 input is TextPair"),
])
def test_bad_pair_rows_are_one_line_errors(rows: list[object], message: str,
                                           tmp_path: Path) -> None:
    with pytest.raises(DataError, match=message) as err:
        read_heldout(_write(tmp_path / "d.jsonl", rows))
    assert "\n" not in str(err.value)


def test_subsets_keep_whole_query_groups() -> None:
    data = reranking_heldout()
    assert len(data) == 150 and len(set(data.groups or [])) == 30
    rows = data.whole_groups(12)  # 5 rows a query: two whole queries, not 12 rows
    assert rows == list(range(10))
    subset = data.take(rows)
    assert subset.groups == data.groups[:10] and subset.labels == data.labels[:10]
    # every bundled query has one passage of each grade 3, 2, 1 and two of grade 0
    for start in range(0, 150, 5):
        assert sorted(data.labels[start:start + 5]) == [0, 0, 1, 2, 3]
