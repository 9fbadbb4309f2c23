"""Held-out data: the user's examples (JSON Lines, CSV, .npz) and the bundled set for minilm.

    {"input": "some text", "label": 3}        one JSON object per line; label optional
    {"query": "q", "passage": "p", "label": 2}  a (query, passage) pair with graded relevance,
                                               grouped by query (or by "group" when given)
    {"input": ["q", "p"], "label": 1}          a pair as an input ({"query":..,"passage":..} too)
    [{"input": ...}, ...]                      .json may also hold one array of such objects
    input,label                                CSV with named columns (--input-column);
    query,passage,label                        pairs in CSV
    inputs=<array>, labels=<array>             .npz; first axis is the example axis

Pairs (data/text_inputs.py) are what a cross-encoder reads; their rows carry ``groups`` (the
query each row belongs to), so ranking metrics are computed per query.

Every problem is reported as one DataError line naming the file, the row and what is wrong.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from infertune.data.text_inputs import TextPair, as_text_input
from infertune.errors import DataError, IncompatibleInputError
from infertune.jsonfile import parse_json, parse_jsonl

BUNDLED_MINILM = Path(__file__).parent / "minilm_heldout.jsonl"
BUNDLED_RERANKING = Path(__file__).parent / "reranking_heldout.jsonl"
QUERY, PASSAGE, GROUP = "query", "passage", "group"


@dataclass
class HeldOut:
    inputs: list[Any]
    labels: list[Any] | None
    source: str
    groups: list[str] | None = None  # pairs: the query group of each row

    def __len__(self) -> int:
        return len(self.inputs)

    def head(self, n: int) -> HeldOut:
        return self.take(list(range(min(n, len(self.inputs)))))

    def take(self, rows: list[int]) -> HeldOut:
        """The examples at ``rows``, in that order, with their labels and groups."""
        labels = [self.labels[i] for i in rows] if self.labels is not None else None
        groups = [self.groups[i] for i in rows] if self.groups is not None else None
        return HeldOut([self.inputs[i] for i in rows], labels, self.source, groups)

    def whole_groups(self, n: int) -> list[int]:
        """Row indices of the first examples up to about ``n``, never cutting a query group
        in two (a ranking metric needs all of a query's passages): whole groups in order of
        first appearance until n rows are reached; without groups, the first n rows."""
        if self.groups is None:
            return list(range(min(n, len(self.inputs))))
        members: dict[str, list[int]] = {}
        for row, group in enumerate(self.groups):
            members.setdefault(group, []).append(row)
        rows: list[int] = []
        for group_rows in members.values():
            if rows and len(rows) + len(group_rows) > n:
                break
            rows.extend(group_rows)
        return sorted(rows)


def read_heldout(path: str | Path, *, input_column: str = "input",
                 label_column: str = "label") -> HeldOut:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file {path} not found; pass --data with a .jsonl, .csv or .npz file")
    readers = {".jsonl": _read_jsonl, ".json": _read_jsonl, ".csv": _read_csv, ".npz": _read_npz}
    reader = readers.get(path.suffix.lower())
    if reader is None:
        raise DataError(f"{path}: unknown data format {path.suffix!r}; use .jsonl, .csv or .npz")
    data = reader(path, input_column, label_column)
    if len(data) == 0:
        raise DataError(f"{path}: no examples; the file is empty")
    return data


def default_heldout() -> HeldOut:
    """The bundled English sentences for minilm (see data/README.md for how they were made)."""
    return read_heldout(BUNDLED_MINILM)


def reranking_heldout() -> HeldOut:
    """The bundled (query, passage, relevance) set for rerankers (see data/README.md)."""
    return read_heldout(BUNDLED_RERANKING)


def _read_jsonl(path: Path, input_column: str, label_column: str) -> HeldOut:
    text = _text(path)
    if path.suffix.lower() == ".json" and text.lstrip().startswith("["):
        records = _json_array(text, path)
    else:
        records = parse_jsonl(text, path, fix="write one JSON object per line", error=DataError)
    inputs: list[Any] = []
    labels: list[Any] = []
    groups: list[Any] = []
    rows: list[int] = []  # each example's row in the file, so errors name the real row
    for lineno, row in records:
        if isinstance(row, dict) and input_column not in row and QUERY in row:
            inputs.append(_pair_row(row, lineno, path))
        elif not isinstance(row, dict) or input_column not in row:
            raise DataError(
                f"{path}: row {lineno} must be an object with an {input_column!r} key "
                f"(or {QUERY!r} and {PASSAGE!r} for a pair)"
            )
        else:
            inputs.append(row[input_column])
        labels.append(row.get(label_column))
        groups.append(row.get(GROUP))
        rows.append(lineno)
    inputs = _checked_inputs(_pairs_read(inputs, rows, path), rows, path)
    return HeldOut(inputs, _labels_or_none(labels, rows, path), str(path),
                   _groups(inputs, groups))


def _pair_row(row: dict[str, Any], lineno: int, path: Path) -> TextPair:
    query, passage = row.get(QUERY), row.get(PASSAGE)
    if not isinstance(query, str) or not isinstance(passage, str):
        raise DataError(f"{path}: row {lineno} needs {QUERY!r} and {PASSAGE!r} as strings")
    return TextPair(query, passage)


def _pairs_read(inputs: list[Any], rows: list[int], path: Path) -> list[Any]:
    """Pairs spelled as a two-string array or a {query, passage} / {text, text_pair} object
    become TextPairs; every other input is left as it is (strings, tensors)."""
    out: list[Any] = []
    for value, lineno in zip(inputs, rows, strict=True):
        if isinstance(value, dict) or (isinstance(value, list) and len(value) == 2
                                       and all(isinstance(x, str) for x in value)):
            try:
                value = as_text_input(value, f"row {lineno}")
            except IncompatibleInputError as exc:
                raise DataError(f"{path}: {exc}") from exc
        out.append(value)
    return out


def _groups(inputs: list[Any], given: list[Any]) -> list[str] | None:
    """Pairs are grouped by their "group" value where rows give one, else by query text."""
    if not inputs or not isinstance(inputs[0], TextPair):
        return None
    return [str(g) if g is not None else f"query:{x.query}"
            for x, g in zip(inputs, given, strict=True)]


def _json_array(text: str, path: Path) -> list[tuple[int, Any]]:
    """A .json file holding one array of objects; rows are counted from 1 in the array."""
    items = parse_json(text, path, fix="write one JSON array of objects", error=DataError)
    return list(enumerate(items, start=1))


def _read_csv(path: Path, input_column: str, label_column: str) -> HeldOut:
    reader = csv.DictReader(io.StringIO(_text(path), newline=""))
    if reader.fieldnames is None:
        return HeldOut([], None, str(path))
    if input_column not in reader.fieldnames and {QUERY, PASSAGE} <= set(reader.fieldnames):
        return _read_csv_pairs(reader, path, label_column)
    if input_column not in reader.fieldnames:
        raise DataError(
            f"{path}: no {input_column!r} column (columns: {', '.join(reader.fieldnames)}); "
            "pass --input-column"
        )
    inputs, labels, rows = [], [], []
    for row in reader:
        lineno = reader.line_num  # the physical line, right even after quoted newlines
        text = row.get(input_column)
        if text is None or text == "":
            raise DataError(f"{path}: row {lineno} has an empty {input_column!r}")
        inputs.append(text)
        labels.append(row.get(label_column) or None)
        rows.append(lineno)
    return HeldOut(inputs, _labels_or_none(labels, rows, path), str(path))


def _read_csv_pairs(reader: csv.DictReader[str], path: Path, label_column: str) -> HeldOut:
    inputs: list[Any] = []
    labels: list[Any] = []
    groups: list[Any] = []
    rows: list[int] = []
    for row in reader:
        lineno = reader.line_num
        if not row.get(QUERY) or not row.get(PASSAGE):
            raise DataError(f"{path}: row {lineno} has an empty {QUERY!r} or {PASSAGE!r}")
        inputs.append(TextPair(row[QUERY], row[PASSAGE]))
        labels.append(row.get(label_column) or None)
        groups.append(row.get(GROUP) or None)
        rows.append(lineno)
    return HeldOut(inputs, _labels_or_none(labels, rows, path), str(path),
                   _groups(inputs, groups))


def _read_npz(path: Path, input_column: str, label_column: str) -> HeldOut:
    try:
        archive = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise DataError(f"{path}: not a readable .npz archive ({exc})") from exc
    key = "inputs" if "inputs" in archive else input_column
    if key not in archive:
        raise DataError(f"{path}: needs an array named 'inputs' (found {list(archive.keys())})")
    arr = archive[key]
    if not np.issubdtype(arr.dtype, np.number) and arr.dtype != np.bool_:
        raise DataError(f"{path}: 'inputs' has dtype {arr.dtype}; tensor inputs must be numeric")
    labels = list(archive["labels"]) if "labels" in archive else None
    if labels is not None and len(labels) != len(arr):
        raise DataError(f"{path}: {len(labels)} labels for {len(arr)} inputs; counts must match")
    return HeldOut(list(arr), labels, str(path))


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{path}: not UTF-8 text (byte {exc.start}); save the file as UTF-8"
        ) from exc


def _checked_inputs(raw: list[Any], rows: list[int], path: Path) -> list[Any]:
    """All inputs must share one JSON type; lists become float32 arrays of one shape."""
    checked: list[Any] = []
    for value, lineno in zip(raw, rows, strict=True):
        if value is None or (isinstance(value, str) and not value.strip()):
            raise DataError(f"{path}: row {lineno} has an empty input")
        if isinstance(value, TextPair) and not (value.query.strip() and value.passage.strip()):
            raise DataError(f"{path}: row {lineno} has an empty query or passage")
        if type(value) is not type(raw[0]):
            raise DataError(
                f"{path}: row {lineno} input is {type(value).__name__} but earlier rows are "
                f"{type(raw[0]).__name__}; all inputs must have one type"
            )
        if isinstance(value, list):
            value = _tensor_row(value, lineno, path, checked[0] if checked else None)
        checked.append(value)
    return checked


def _tensor_row(value: list[Any], lineno: int, path: Path, first: np.ndarray | None) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise DataError(
            f"{path}: row {lineno} input is not a rectangular array of numbers"
        ) from exc
    if first is not None and arr.shape != first.shape:
        raise DataError(
            f"{path}: row {lineno} input has shape {arr.shape} but earlier rows have "
            f"{first.shape}; tensor inputs must share one shape"
        )
    return arr


def _labels_or_none(labels: list[Any], rows: list[int], path: Path) -> list[Any] | None:
    present = [lab is not None for lab in labels]
    if not any(present):
        return None
    if not all(present):
        row = rows[present.index(False)]
        raise DataError(f"{path}: row {row} has no label while others do; label all or none")
    return labels
