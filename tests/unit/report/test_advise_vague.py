"""`advise` reads the vague numbers people write ("50ms", "about 50", "~20", free-text
traffic) as the numbers they state, each listed as an assumption in the report, and refuses
only contradictions, in one line."""

from __future__ import annotations

import json

import pytest

from infertune.cli import main
from infertune.report.vague import VagueReadings, read_number, read_pattern

VAGUE = """\
model: {family: transformer-encoder, task: embedding, framework: pytorch}
slo: {p95_ms: "50ms"}
current: {p95_ms: "about 50", rps: "1,200 per minute"}
traffic: {mean_rps: "~20", peak_rps: "40-60", pattern: "spiky at lunch"}
"""


@pytest.mark.parametrize("text, unit, value, how", [
    ("50ms", "ms", 50.0, ""),
    ("50 milliseconds", "ms", 50.0, ""),
    ("0.05 s", "ms", 50.0, "converted from s"),
    ("about 50", "ms", 50.0, "an approximate figure"),
    ("50ish", "ms", 50.0, "an approximate figure"),
    ("~20", "rps", 20.0, "an approximate figure"),
    ("20 req/s", "rps", 20.0, ""),
    ("1,200 per minute", "rps", 20.0, "converted from per minute"),
    ("40-60", "rps", 50.0, "a range, read as its middle (40 to 60)"),
    ("under 100 ms", "ms", 100.0, "a bound (at most), read as the bound itself"),
    ("$0.05", "usd", 0.05, ""),
    ("2k", "rps", 2000.0, ""),
])
def test_read_number(text, unit, value, how) -> None:
    reading = read_number(text, unit)
    assert reading is not None and reading.value == value and reading.how == how


@pytest.mark.parametrize("text", ["fast", "50 parsecs", "", "soon-ish"])
def test_unreadable_numbers_are_none(text) -> None:
    assert read_number(text, "ms") is None


@pytest.mark.parametrize("text, pattern", [
    ("spiky at lunch", "spiky"), ("steady with spikes at lunch", "spiky"),
    ("steady, no spikes", "steady"), ("comes in bursts", "bursty"), ("pretty flat", "steady"),
    ("who knows", None),
])
def test_read_pattern(text, pattern) -> None:
    assert read_pattern(text) == pattern


def test_readings_list_every_assumption_and_drop_the_unreadable() -> None:
    readings = VagueReadings()
    data = readings.read({"slo": {"p95_ms": "fast"}, "inputs": {"typical": {"seq_len": "~128"}},
                          "traffic": {"pattern": "who knows", "mean_rps": 20}})
    assert data == {"slo": {}, "inputs": {"typical": {"seq_len": 128}},
                    "traffic": {"mean_rps": 20}}
    assert readings.assumptions == [
        "slo.p95_ms: 'fast' states no number this can read, so it is treated as not stated "
        "(write it as a number, e.g. 50 or '50 ms')",
        "inputs.typical.seq_len: read '~128' as 128 (an approximate figure)",
        "traffic.pattern: 'who knows' names no pattern this can read (steady, bursty or "
        "spiky), so it is treated as not stated"]


def test_advise_reads_vague_numbers_as_listed_assumptions(tmp_path, capsys) -> None:
    path = tmp_path / "vague.yaml"
    path.write_text(VAGUE)
    assert main(["advise", str(path), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["assumptions"][:6] == [
        "slo.p95_ms: read '50ms' as 50 ms",
        "current.p95_ms: read 'about 50' as 50 ms (an approximate figure)",
        "current.rps: read '1,200 per minute' as 20 requests/s (converted from per minute)",
        "traffic.mean_rps: read '~20' as 20 requests/s (an approximate figure)",
        "traffic.peak_rps: read '40-60' as 50 requests/s (a range, read as its middle (40 to "
        "60))",
        "traffic.pattern: read the description 'spiky at lunch' as spiky (its details, such as "
        "when the peaks come, are not used; state peak_rps for the size of the peak)"]
    assert "traffic" not in [m["fact"] for m in report["missing_facts"]]
    assert main(["advise", str(path)]) == 0  # and the Markdown lists them under Assumptions
    md = capsys.readouterr().out
    assert "- slo.p95_ms: read '50ms' as 50 ms" in md.split("### Assumptions", 1)[1]


@pytest.mark.parametrize("content, expected", [
    ('slo: {p95_ms: "about 50", p99_ms: "40ms"}\n', "p99_ms (40.0) is below p95_ms (50.0)"),
    ('traffic: {mean_rps: "~20", peak_rps: "10 rps"}\n',
     "peak_rps (10.0) is below mean_rps (20.0)"),
])
def test_advise_refuses_contradictions_in_one_line(tmp_path, capsys, content, expected) -> None:
    path = tmp_path / "contradiction.yaml"
    path.write_text(content)
    assert main(["advise", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and expected in captured.err


def test_interview_reads_a_vague_answer_and_says_how() -> None:
    from infertune.report.interview import QUESTIONS, _ask_one

    said: list[str] = []
    answers = iter(["soon", "about 150"])
    slo = QUESTIONS["slo"][0]
    data = _ask_one(slo, {}, lambda q: next(answers), said.append, None)
    assert data == {"slo": {"p95_ms": 150.0}}
    assert said == ["'soon' is not a number; e.g. 150",
                    "read 'about 150' as 150 (an approximate figure)"]
