"""The commented YAML writer: what a YAML parser reads back equals the data, comments and all
the awkward strings included."""

from __future__ import annotations

import yaml

from infertune.export.plan import Sourced
from infertune.export.yamlemit import dump, dump_all, plain

DOC = {
    "apiVersion": "apps/v1",
    "on": "yes",
    "n": Sourced(3, "report.json: a # inside\na second line"),
    "cpu": Sourced("4", "hardware.json"),
    "nested": {"list": [1, 2.5, True, None, "", "1e3", "- dash", {"k": Sourced("v", "s")},
                        [], {}, [{"deep": [{"x": 1}]}]],
               "empty": {}},
    "text": "line one\nline two\n",
    "indented": "  leading\nblank\n",
    "unicode": "é — ok: yes",
    "key with space": 1,
}


def test_round_trip_equals_the_data() -> None:
    text = dump(DOC, ["header"])
    assert yaml.safe_load(text) == plain(DOC)
    assert text.startswith("# header\n")
    assert '"n": 3  # report.json: a # inside a second line' in text  # "n" reads as false
    assert 'cpu: "4"  # hardware.json' in text  # a numeric-looking string stays a string
    assert "text: |\n  line one\n  line two\n" in text


def test_several_documents() -> None:
    docs = [{"a": 1}, {"b": Sourced(2, "x")}]
    assert list(yaml.safe_load_all(dump_all(docs))) == [{"a": 1}, {"b": 2}]
