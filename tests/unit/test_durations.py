"""One duration parser for every command (compare's --budget, optimize's --budget, loadtest's
--duration): the same spellings are accepted and refused everywhere."""

from __future__ import annotations

import pytest

from infertune.cli.compare import parse_duration as compare_parser
from infertune.durations import parse_duration
from infertune.errors import ConfigError
from infertune.loadgen import parse_duration as loadgen_parser


@pytest.mark.parametrize("text,seconds", [
    ("500ms", 0.5), ("30s", 30.0), ("30 s", 30.0), ("90", 90.0), ("2m", 120.0),
    ("2min", 120.0), ("1h", 3600.0), ("1.5h", 5400.0), ("2MIN", 120.0), (".5s", 0.5),
    ("10sec", 10.0),
])
def test_accepted_spellings(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["soon", "", "0s", "-3m", "1d", "5 minutes", "1e3s", "s",
                                  "nan", "inf"])
def test_refused_spellings_name_the_option_and_the_fix(text: str) -> None:
    with pytest.raises(ConfigError, match=r"--budget .*30s") as info:
        parse_duration(text, "--budget")
    assert "\n" not in str(info.value)


def test_every_command_uses_the_same_parser() -> None:
    assert compare_parser is parse_duration
    assert loadgen_parser is parse_duration
