"""The commented YAML writer: what a YAML parser reads back equals the data, comments and all
the awkward strings included."""

from __future__ import annotations

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from infertune.export.deploy_plan import Sourced
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


_scalars = (st.none() | st.booleans() | st.integers(-10**9, 10**9)
            | st.floats(allow_nan=False, allow_infinity=False, width=32) | st.text(max_size=20))
_leaves = _scalars | st.builds(Sourced, st.integers(-100, 100) | st.text(max_size=10),
                               st.text(max_size=30))
_docs = st.recursive(_leaves, lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(min_size=1, max_size=8), inner, max_size=4),
                     max_leaves=20)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=8), _docs, max_size=5))
def test_any_document_round_trips(doc: dict) -> None:
    assert yaml.safe_load(dump(doc)) == plain(doc)


def test_a_key_or_value_ending_in_a_newline_is_quoted() -> None:
    # found by test_any_document_round_trips: "$" matched before the final newline, so
    # {"a\n": "b\n"} was written bare and the file did not parse
    doc = {"a\n": "b\n", "plain": "c"}
    text = dump(doc)
    assert yaml.safe_load(text) == doc
    assert '"a\\u000a": "b\\u000a"' in text and "plain: c" in text
