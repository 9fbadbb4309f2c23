"""JSON files: one reader, one JSON-lines reader, one atomic writer, one wording for errors.

Every JSON *file* infertune reads (run artifacts, manifests, held-out data, body and prompt
files) goes through :func:`read_json` or :func:`read_jsonl`, so a damaged file is reported the
same way wherever it is read, in one line that names the file, the place and the fix:

    runs/a/run.json: not valid JSON at line 3, column 5 (Expecting ',' delimiter); <fix>
    runs/a/run.json: cannot be read (No such file or directory); <fix>

The caller supplies the fix (what the user should do: rerun a command, pass another flag) and
the error class (ConfigError for artifacts, DataError for user data, ModelLoadError for model
folders). HTTP request bodies are request validation, not files, and are parsed in serve/ and
loadgen/ with their own status codes.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from infertune.errors import ConfigError, InfertuneError

__all__ = ["parse_json", "parse_jsonl", "read_json", "read_jsonl", "write_json"]


def read_json(path: str | Path, *, fix: str,
              error: type[InfertuneError] = ConfigError) -> Any:
    """The JSON value in ``path``; a missing, unreadable or malformed file raises ``error``."""
    path = Path(path)
    return parse_json(_read_text(path, fix, error), path, fix=fix, error=error)


def read_jsonl(path: str | Path, *, fix: str,
               error: type[InfertuneError] = ConfigError) -> list[tuple[int, Any]]:
    """(line number from 1, value) for each non-blank line of a JSON Lines file."""
    path = Path(path)
    return parse_jsonl(_read_text(path, fix, error), path, fix=fix, error=error)


def parse_json(text: str, source: str | Path, *, fix: str,
               error: type[InfertuneError] = ConfigError) -> Any:
    """:func:`read_json` for text already read from ``source`` (a file's name, for the message)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(_invalid(source, exc.lineno, exc.colno, exc.msg, fix)) from exc


def parse_jsonl(text: str, source: str | Path, *, fix: str,
                error: type[InfertuneError] = ConfigError) -> list[tuple[int, Any]]:
    """:func:`read_jsonl` for text already read from ``source``."""
    records: list[tuple[int, Any]] = []
    # split on "\n" only: str.splitlines would also cut at U+2028 and other characters that a
    # JSON string may hold unescaped, and misnumber every line after them
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            records.append((lineno, json.loads(line)))
        except json.JSONDecodeError as exc:
            # one line parsed alone: the decoder's own line is always 1, the file's is lineno
            raise error(_invalid(source, lineno, exc.colno, exc.msg, fix)) from exc
    return records


def json_text(payload: Any, *, indent: int = 2, sort_keys: bool = False) -> str:
    """``payload`` as write_json writes it: indented, a trailing newline, ``str`` for values
    JSON has no type for (so printing a typed file's dict gives the file's text)."""
    return json.dumps(payload, indent=indent, sort_keys=sort_keys, default=str) + "\n"


def write_json(path: str | Path, payload: Any, *, indent: int = 2,
               sort_keys: bool = False) -> Path:
    """Write ``payload`` as indented JSON with a trailing newline, creating the parent folder.

    Atomic: the text goes to a temporary file in the same folder, which then replaces ``path``,
    so a reader never sees half a file and a value that cannot be encoded leaves the old file
    as it was. Values JSON has no type for (a Path, a datetime) are written as ``str(value)``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # encoded in full first: a value that cannot be encoded fails before anything is written
    text = json_text(payload, indent=indent, sort_keys=sort_keys)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    # os.open with 0o666 lets the umask set the mode, as a plain write would (mkstemp's 0o600
    # would hide a report from the other users of a shared machine)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _read_text(path: Path, fix: str, error: type[InfertuneError]) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: cannot be read (not UTF-8 text at byte {exc.start}); {fix}") from exc
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror or exc}); {fix}") from exc


def _invalid(source: str | Path, line: int, column: int, msg: str, fix: str) -> str:
    return f"{source}: not valid JSON at line {line}, column {column} ({msg}); {fix}"
