"""Held-out data readers: JSONL, CSV, NPZ, and every kind of bad file as one DataError line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from infertune.data import read_heldout
from infertune.errors import DataError


def _file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _error(path: Path, **kwargs: str) -> str:
    with pytest.raises(DataError) as info:
        read_heldout(path, **kwargs)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return message


def test_jsonl_with_and_without_labels(tmp_path: Path) -> None:
    text = '{"input": "a b", "label": 1}\n\n{"input": "c", "label": 0}\n'
    path = _file(tmp_path, "d.jsonl", text)
    data = read_heldout(path)
    assert data.inputs == ["a b", "c"] and data.labels == [1, 0] and len(data) == 2
    assert data.source == str(path)
    assert data.head(1).inputs == ["a b"] and data.head(1).labels == [1]
    bare = read_heldout(_file(tmp_path, "e.jsonl", '{"input": "x"}\n{"input": "y"}\n'))
    assert bare.labels is None


def test_jsonl_tensor_rows_become_float_arrays(tmp_path: Path) -> None:
    data = read_heldout(_file(tmp_path, "t.jsonl", '{"input": [1, 2]}\n{"input": [3, 4]}\n'))
    assert data.inputs[1].dtype == np.float32
    np.testing.assert_array_equal(data.inputs[1], [3.0, 4.0])


def test_csv_with_named_columns(tmp_path: Path) -> None:
    path = _file(tmp_path, "d.csv", "text,y\nhello,pos\n\"a, b\",neg\n")
    data = read_heldout(path, input_column="text", label_column="y")
    assert data.inputs == ["hello", "a, b"] and data.labels == ["pos", "neg"]
    assert read_heldout(_file(tmp_path, "n.csv", "input\nx\n")).labels is None


def test_npz_inputs_and_labels(tmp_path: Path) -> None:
    path = tmp_path / "d.npz"
    np.savez(path, inputs=np.arange(12, dtype=np.float32).reshape(3, 4), labels=np.array([0, 1, 0]))
    data = read_heldout(path)
    assert len(data) == 3 and data.inputs[2].tolist() == [8.0, 9.0, 10.0, 11.0]
    assert [int(x) for x in data.labels] == [0, 1, 0]


def test_npz_bad_archives(tmp_path: Path) -> None:
    np.savez(tmp_path / "a.npz", x=np.zeros(3))
    assert "'inputs'" in _error(tmp_path / "a.npz")
    np.savez(tmp_path / "b.npz", inputs=np.zeros((3, 2)), labels=np.zeros(2))
    assert "2 labels for 3 inputs" in _error(tmp_path / "b.npz")
    np.savez(tmp_path / "c.npz", inputs=np.array(["a", "b"]))
    assert "numeric" in _error(tmp_path / "c.npz")
    assert "not a readable .npz archive" in _error(_file(tmp_path, "d.npz", "not a zip"))


def test_wrong_format_suffix(tmp_path: Path) -> None:
    assert "unknown data format '.txt'" in _error(_file(tmp_path, "d.txt", "hello\n"))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found"):
        read_heldout(tmp_path / "absent.jsonl")


def test_empty_files(tmp_path: Path) -> None:
    assert "empty" in _error(_file(tmp_path, "e.jsonl", ""))
    assert "empty" in _error(_file(tmp_path, "e.csv", ""))
    assert "empty" in _error(_file(tmp_path, "h.csv", "input,label\n"))


def test_invalid_json_row(tmp_path: Path) -> None:
    message = _error(_file(tmp_path, "d.jsonl", '{"input": "a"}\n{"input": \n'))
    assert "d.jsonl: not valid JSON at line 2, column 11 (Expecting value); write one" in message


def test_missing_input_key(tmp_path: Path) -> None:
    message = _error(_file(tmp_path, "d.jsonl", '{"input": "a"}\n{"text": "b"}\n'))
    assert "row 2" in message and "'input'" in message


def test_mixed_types(tmp_path: Path) -> None:
    message = _error(_file(tmp_path, "d.jsonl", '{"input": "a"}\n{"input": 3}\n'))
    assert "row 2 input is int but earlier rows are str" in message


def test_partial_labels(tmp_path: Path) -> None:
    path = _file(tmp_path, "d.jsonl", '{"input": "a", "label": 1}\n{"input": "b"}\n')
    assert "row 2 has no label" in _error(path)


def test_empty_input(tmp_path: Path) -> None:
    assert "row 2 has an empty input" in _error(
        _file(tmp_path, "d.jsonl", '{"input": "a"}\n{"input": "  "}\n'))
    assert "row 3 has an empty 'input'" in _error(_file(tmp_path, "d.csv", "input\na\n\"\"\n"))


def test_csv_without_the_column(tmp_path: Path) -> None:
    message = _error(_file(tmp_path, "d.csv", "text,label\nhello,1\n"))
    assert "no 'input' column (columns: text, label)" in message and "--input-column" in message


def test_tensor_rows_must_be_rectangular_and_share_a_shape(tmp_path: Path) -> None:
    ragged = _file(tmp_path, "r.jsonl", '{"input": [1, 2]}\n{"input": [[1], [2, 3]]}\n')
    assert "row 2 input is not a rectangular array" in _error(ragged)
    shapes = _file(tmp_path, "s.jsonl", '{"input": [1, 2]}\n{"input": [1, 2, 3]}\n')
    assert "row 2 input has shape (3,) but earlier rows have (2,)" in _error(shapes)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"input": "caf\xe9"}\n')
    assert "not UTF-8" in _error(path)


def test_rows_named_by_file_line_after_blank_lines_and_quoted_newlines(tmp_path: Path) -> None:
    jsonl = _file(tmp_path, "d.jsonl", '{"input": "a", "label": 1}\n\n\n{"input": "b"}\n')
    assert "row 4 has no label" in _error(jsonl)
    csv_path = _file(tmp_path, "d.csv", 'input,label\n"two\nlines",1\nsolo,\n')
    assert "row 4 has no label" in _error(csv_path)


def test_bundled_minilm_set_reads() -> None:
    from infertune.data import BUNDLED_MINILM, default_heldout

    if not BUNDLED_MINILM.is_file():
        pytest.fail(f"{BUNDLED_MINILM} is missing; the minilm held-out set must ship")
    data = default_heldout()
    assert len(data) >= 500 and all(isinstance(x, str) and x.strip() for x in data.inputs)


def test_json_array_file(tmp_path: Path) -> None:
    data = read_heldout(_file(tmp_path, "d.json", '[{"input": "a", "label": 1},\n {"input": "b",'
                                                  ' "label": 0}]'))
    assert data.inputs == ["a", "b"] and data.labels == [1, 0]
    assert "row 2 must be an object" in _error(_file(tmp_path, "e.json", '[{"input": "a"}, 3]'))
    assert "not valid JSON at line 2" in _error(_file(tmp_path, "f.json", '[{"input": "a"},\n'))
