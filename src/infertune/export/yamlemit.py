"""A small YAML writer that keeps a comment beside every sourced value.

PyYAML drops comments, and the point of an exported manifest is that each number says where it
came from, so documents are built from plain dicts, lists and scalars in which any scalar may
be a ``Sourced`` (value + source); ``dump`` writes ``key: value  # source``. The output is
block-style YAML that ``yaml.safe_load`` reads back to the same data (a test checks this).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from infertune.export.deploy_plan import Sourced

Node = Any  # dict[str, Node] | list[Node] | str | int | float | bool | None | Sourced
# \Z, not $: "$" also matches before a final newline, and "a\n" written bare breaks the file
_BARE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*\Z")
# YAML 1.1 reads these bare words as booleans or null, so such keys stay quoted
_RESERVED = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def plain(node: Node) -> Any:
    """The data without its comments (what a YAML parser reads back)."""
    if isinstance(node, Sourced):
        return node.value
    if isinstance(node, Mapping):
        return {k: plain(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [plain(v) for v in node]
    return node


def dump(doc: Node, header: Sequence[str] = ()) -> str:
    lines = [f"# {h}" if h else "#" for h in header]
    if _is_leaf(doc):
        lines.append(_leaf(doc))  # an empty mapping or list, or a lone scalar
    else:
        _emit(doc, 0, lines)
    return "\n".join(lines) + "\n"


def dump_all(docs: Sequence[Node], header: Sequence[str] = ()) -> str:
    parts = [dump(doc, header if i == 0 else ()) for i, doc in enumerate(docs)]
    return "---\n".join(parts)


def _scalar(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return json.dumps(value)
    text = str(value)
    if _BARE_KEY.match(text) and text.lower() not in _RESERVED:
        return text
    return _quote(text)


def _quote(text: str) -> str:
    """A YAML double-quoted scalar in printable ASCII: YAML readers refuse some characters
    raw (NEL, BOM, surrogates), and read astral characters only as \\U escapes (JSON's
    surrogate pairs come back as two characters)."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'



def _key(key: str) -> str:
    return _scalar(key)


def _comment(node: Node) -> str:
    if isinstance(node, Sourced):
        # a comment is read too: keep it on one line, printable ASCII
        text = " ".join(node.source.split()).encode("ascii", "replace").decode()
        return "  # " + "".join(c if c.isprintable() else "?" for c in text)
    return ""


def _is_leaf(node: Node) -> bool:
    return not isinstance(node, (Mapping, list, tuple)) or len(node) == 0


def _is_block(value: Any) -> bool:
    """A multi-line string written as a literal block (``|``): read back unchanged when no
    line has leading or trailing blanks and it ends with one newline."""
    if not isinstance(value, str) or "\n" not in value.rstrip("\n") or not value.endswith("\n"):
        return False
    lines = value[:-1].split("\n")
    return all(line == line.strip() and line and line.isascii() and line.isprintable()
               for line in lines)


def _leaf(node: Node) -> str:
    if isinstance(node, Mapping):
        return "{}"
    if isinstance(node, (list, tuple)):
        return "[]"
    value = node.value if isinstance(node, Sourced) else node
    return _scalar(value) + _comment(node)


def _emit(node: Node, indent: int, lines: list[str]) -> None:
    pad = " " * indent
    if isinstance(node, Mapping):
        for key, value in node.items():
            if _is_block(value):
                lines.append(f"{pad}{_key(key)}: |")
                lines += [f"{pad}  {line}" for line in value[:-1].split("\n")]
            elif _is_leaf(value):
                lines.append(f"{pad}{_key(key)}: {_leaf(value)}")
            else:
                lines.append(f"{pad}{_key(key)}:")
                _emit(value, indent + 2, lines)
    elif isinstance(node, (list, tuple)):
        for item in node:
            if _is_leaf(item):
                lines.append(f"{pad}- {_leaf(item)}")
                continue
            start = len(lines)
            _emit(item, indent + 2, lines)
            # the item's first line moves onto the dash: "- key: value"
            lines[start] = f"{pad}- {lines[start][indent + 2:]}"
    else:
        lines.append(f"{pad}{_leaf(node)}")
