"""The one JSON file reader and writer: its messages, its line numbers, its atomic write."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from infertune import jsonfile
from infertune.errors import ConfigError, DataError
from infertune.jsonfile import read_json, read_jsonl, write_json

FIX = "rerun infertune optimize"


def _message(excinfo: pytest.ExceptionInfo[Exception]) -> str:
    return str(excinfo.value)


def test_a_valid_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text('{"a": [1, 2.5, null], "b": "é"}\n', encoding="utf-8")
    assert read_json(path, fix=FIX) == {"a": [1, 2.5, None], "b": "é"}


def test_invalid_json_names_the_file_the_place_and_the_fix_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text('{\n  "a": 1\n  "b": 2\n}\n')
    with pytest.raises(ConfigError) as excinfo:
        read_json(path, fix=FIX)
    assert _message(excinfo) == (f"{path}: not valid JSON at line 3, column 3 "
                                 f"(Expecting ',' delimiter); {FIX}")
    assert isinstance(excinfo.value.__cause__, json.JSONDecodeError)


def test_the_caller_chooses_the_error_class(tmp_path: Path) -> None:
    path = tmp_path / "data.json"
    path.write_text("[1,")
    with pytest.raises(DataError, match=r"data.json: not valid JSON at line 1, column 4"):
        read_json(path, fix="write one JSON array", error=DataError)


def test_a_missing_file_says_it_cannot_be_read(tmp_path: Path) -> None:
    path = tmp_path / "absent.json"
    with pytest.raises(ConfigError) as excinfo:
        read_json(path, fix=FIX)
    assert _message(excinfo) == f"{path}: cannot be read (No such file or directory); {FIX}"


def test_a_folder_or_non_utf8_bytes_cannot_be_read(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r": cannot be read \(Is a directory\); rerun"):
        read_json(tmp_path, fix=FIX)
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"a": "\xe9"}')
    with pytest.raises(ConfigError) as excinfo:
        read_json(path, fix=FIX)
    assert _message(excinfo) == f"{path}: cannot be read (not UTF-8 text at byte 7); {FIX}"


def test_jsonl_names_the_bad_line_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bodies.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n{"a": \n')
    with pytest.raises(DataError) as excinfo:
        read_jsonl(path, fix="write one JSON value per line", error=DataError)
    assert _message(excinfo) == (f"{path}: not valid JSON at line 4, column 7 "
                                 "(Expecting value); write one JSON value per line")


def test_jsonl_skips_blank_lines_and_numbers_lines_from_one(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('\n{"a": 1}\r\n   \n[2]\n"\u2028"\n7')
    assert read_jsonl(path, fix=FIX) == [(2, {"a": 1}), (4, [2]), (5, "\u2028"), (6, 7)]


def test_write_then_read_round_trips(tmp_path: Path) -> None:
    payload: dict[str, Any] = {"b": [1, 2.5, None, True], "a": {"nested": "é"}, "n": 3}
    path = write_json(tmp_path / "deep" / "er" / "out.json", payload)
    assert path == tmp_path / "deep" / "er" / "out.json"
    assert read_json(path, fix=FIX) == payload
    text = path.read_text()
    assert text == json.dumps(payload, indent=2) + "\n"  # key order kept, a trailing newline


def test_write_options_and_values_json_has_no_type_for(tmp_path: Path) -> None:
    path = write_json(tmp_path / "m.json", {"z": 1, "p": Path("x/y")}, indent=1, sort_keys=True)
    assert path.read_text() == '{\n "p": "x/y",\n "z": 1\n}\n'


def test_a_payload_that_cannot_be_encoded_leaves_the_old_file_intact(tmp_path: Path) -> None:
    path = write_json(tmp_path / "state.json", {"ok": 1})
    before = path.read_bytes()
    circular: list[Any] = []
    circular.append(circular)
    with pytest.raises(ValueError, match="Circular reference"):
        write_json(path, {"ok": 2, "loop": circular})
    with pytest.raises(TypeError):
        write_json(path, {(1, 2): "tuple keys"})
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_a_write_that_fails_midway_leaves_no_partial_file(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_json(tmp_path / "state.json", {"ok": 1})
    before = path.read_bytes()

    def fail(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(jsonfile.os, "replace", fail)
    with pytest.raises(OSError, match="No space left"):
        write_json(path, {"ok": 2})
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_a_written_file_gets_the_usual_mode(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = write_json(tmp_path / "report.json", {})
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


def test_json_text_is_what_write_json_writes(tmp_path: Path) -> None:
    # optimize --json prints the typed report through json_text: the bytes report.json holds
    payload = {"b": 1.5, "a": [Path("x"), None], "é": "ü"}
    path = write_json(tmp_path / "r.json", payload)
    assert path.read_text(encoding="utf-8") == jsonfile.json_text(payload)
    assert jsonfile.json_text(payload) == ('{\n  "b": 1.5,\n  "a": [\n    "x",\n    null\n  ],\n'
                                           '  "\\u00e9": "\\u00fc"\n}\n')
