"""Reading the vague numbers people write in a scenario for ``advise``: "50ms", "about 50",
"~20", "1,200 per minute", "40-60", and free-text traffic ("spiky at lunch").

A latency review starts from what a team knows, and teams know their numbers roughly. Refusing
``p95_ms: "50ms"`` sends them back to edit a file for a unit the field already names. So
``read_vague`` turns each such value into the number it states, in the field's unit, and says
so: every reading is an assumption listed in the report ("slo.p95_ms: read 'about 50' as 50
ms (an approximate figure)"). A value it cannot read at all is treated as not stated (the
report's missing facts then cover it), with that listed too. Only contradictions are refused,
and those by the Scenario's own validation after the reading (a p99 below the p95, a peak
below the mean), in one line naming the fields.

``optimize`` keeps the strict reading: its scenario drives measurements, and a number there
should be the number the user meant, not one read from prose.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

Unit = Literal["ms", "rps", "usd", "gb", "days", "millions", "count"]

_LATENCY = ("p50_ms", "p95_ms", "p99_ms", "ttft_p95_ms", "ttft_p99_ms", "itl_p95_ms",
            "itl_p99_ms")
_COUNTS = ("batch_size", "seq_len", "prompt_tokens", "output_tokens")
NUMBER_FIELDS: dict[tuple[str, ...], Unit] = {
    **{("slo", k): "ms" for k in _LATENCY},
    **{("current", k): "ms" for k in _LATENCY},
    ("current", "rps"): "rps",
    ("traffic", "mean_rps"): "rps",
    ("traffic", "peak_rps"): "rps",
    ("deployment", "cost_per_hour_usd"): "usd",
    ("deployment", "hardware", "memory_gb"): "gb",
    ("model", "parameters_millions"): "millions",
    ("constraints", "cost_ceiling_usd_per_1k"): "usd",
    ("constraints", "rollout_window_days"): "days",
    **{("inputs", shape, k): "count" for shape in ("typical", "worst") for k in _COUNTS},
}

# unit words -> factor into the field's unit; "" is a bare number
UNIT_WORDS: dict[Unit, dict[str, float]] = {
    "ms": {"": 1.0, "ms": 1.0, "msec": 1.0, "msecs": 1.0, "millisecond": 1.0,
           "milliseconds": 1.0, "s": 1000.0, "sec": 1000.0, "secs": 1000.0, "second": 1000.0,
           "seconds": 1000.0, "us": 0.001, "µs": 0.001, "microseconds": 0.001},
    "rps": {"": 1.0, "rps": 1.0, "qps": 1.0, "req/s": 1.0, "requests/s": 1.0, "/s": 1.0,
            "per second": 1.0, "requests per second": 1.0, "a second": 1.0, "rpm": 1 / 60,
            "req/min": 1 / 60, "/min": 1 / 60, "per minute": 1 / 60, "a minute": 1 / 60,
            "requests per minute": 1 / 60, "per hour": 1 / 3600, "an hour": 1 / 3600,
            "requests per hour": 1 / 3600, "/h": 1 / 3600},
    "usd": {"": 1.0, "usd": 1.0, "dollars": 1.0, "$": 1.0, "cents": 0.01},
    "gb": {"": 1.0, "gb": 1.0, "gib": 1.0, "g": 1.0, "tb": 1024.0},
    "days": {"": 1.0, "d": 1.0, "day": 1.0, "days": 1.0, "week": 7.0, "weeks": 7.0},
    "millions": {"": 1.0, "m": 1.0, "million": 1.0, "b": 1000.0, "billion": 1000.0},
    "count": {"": 1.0, "tokens": 1.0, "token": 1.0, "requests": 1.0, "inputs": 1.0},
}
UNIT_NAMES: dict[Unit, str] = {"ms": "ms", "rps": "requests/s", "usd": "USD", "gb": "GB",
                               "days": "days", "millions": "million parameters", "count": ""}

_HEDGES = r"(?:about|around|approx\.?|approximately|roughly|circa|ca\.|some|maybe|~|≈)"
_BOUNDS = {"under": "at most", "below": "at most", "less than": "at most", "<": "at most",
           "<=": "at most", "at most": "at most", "up to": "at most", "max": "at most",
           "over": "at least", "above": "at least", "more than": "at least", ">": "at least",
           ">=": "at least", "at least": "at least"}
_NUM = r"\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?k?"


@dataclass(frozen=True)
class Reading:
    """A number read from text, and how (for the assumption it becomes)."""

    value: float
    how: str  # "" for a plain number with the field's own unit


def _number(text: str) -> float:
    scale = 1000.0 if text.endswith("k") else 1.0
    return float(text.rstrip("k").replace(",", "")) * scale


def read_number(text: str, unit: Unit) -> Reading | None:
    """``text`` as a number in ``unit``, or None when it states no number this can read."""
    t = re.sub(r"\s+", " ", text.strip().lower())
    notes: list[str] = []
    hedged = re.match(rf"^{_HEDGES}\s*(.*)$", t) or re.match(r"^(.*?)\s*(?:-?ish|or so)$", t)
    if hedged:
        t, notes = hedged.group(1).strip(), ["an approximate figure"]
    for word, kind in sorted(_BOUNDS.items(), key=lambda kv: -len(kv[0])):
        if t.startswith(word):
            t = t[len(word):].strip()
            notes.append(f"a bound ({kind}), read as the bound itself")
            break
    if t.startswith("$"):
        t = t[1:].strip() + " usd"
    span = re.match(rf"^(?:between )?({_NUM})\s*(?:-|–|to|and)\s*({_NUM})\s*(.*)$", t)
    if span:
        low, high, rest = _number(span.group(1)), _number(span.group(2)), span.group(3)
        value = (low + high) / 2
        notes.append(f"a range, read as its middle ({low:g} to {high:g})")
    else:
        one = re.match(rf"^({_NUM})\s*(.*)$", t)
        if not one:
            return None
        value, rest = _number(one.group(1)), one.group(2)
    factor = UNIT_WORDS[unit].get(rest.strip().rstrip("."))
    if factor is None:
        return None
    if rest.strip() and factor != 1.0:
        notes.append(f"converted from {rest.strip()}")
    return Reading(float(f"{value * factor:.6g}"), "; ".join(notes))


# Free-text traffic: the most variable pattern a description names wins, since assuming calmer
# traffic than the real one is the mistake that costs a tail (a burst finds no headroom).
PATTERN_WORDS: tuple[tuple[str, str], ...] = (
    ("spiky", r"spik\w*|peak\w*|surge\w*|flash|rush\w*|lunch|morning|evening|launch\w*"),
    ("bursty", r"burst\w*|batch\w* of|clump\w*|waves?|irregular|uneven|variable|varies"),
    ("steady", r"steady|constant|flat|even|uniform|stable|smooth|regular|poisson"),
)
_NEGATION = r"\b(?:no|not|never|without|rarely)\s+(?:\w+\s+)?"


def read_pattern(text: str) -> str | None:
    """The traffic pattern a description names (steady, bursty, spiky), or None."""
    t = text.strip().lower()
    for pattern, words in PATTERN_WORDS:
        for m in re.finditer(rf"\b(?:{words})\b", t):
            if not re.search(rf"{_NEGATION}$", t[:m.start()]):
                return pattern
    return None


@dataclass
class VagueReadings:
    """``read`` is a ``load_scenario(prepare=...)`` hook; ``assumptions`` lists what it did."""

    assumptions: list[str] = field(default_factory=list)

    def read(self, data: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(data)
        for path, unit in NUMBER_FIELDS.items():
            _update(out, path, functools.partial(self._number, path, unit))
        _update(out, ("traffic", "pattern"), self._pattern)
        return out

    def _number(self, path: tuple[str, ...], unit: Unit, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        name = ".".join(path)
        reading = read_number(value, unit)
        if reading is None:
            self.assumptions.append(
                f"{name}: {value!r} states no number this can read, so it is treated as not "
                f"stated (write it as a number{_example(unit)})")
            return _UNSET
        number: float | int = reading.value
        if unit == "count" and reading.value == int(reading.value):
            number = int(reading.value)
        if reading.how or value.strip() != f"{number:g}":
            unit_name = UNIT_NAMES[unit]
            self.assumptions.append(
                f"{name}: read {value!r} as {number:g}{' ' + unit_name if unit_name else ''}"
                + (f" ({reading.how})" if reading.how else ""))
        return number

    def _pattern(self, value: Any) -> Any:
        allowed = ("steady", "bursty", "spiky", "trace")
        if not isinstance(value, str) or value.strip().lower() in allowed:
            return value.strip().lower() if isinstance(value, str) else value
        found = read_pattern(value)
        if found is None:
            self.assumptions.append(
                f"traffic.pattern: {value!r} names no pattern this can read (steady, bursty "
                "or spiky), so it is treated as not stated")
            return _UNSET
        self.assumptions.append(
            f"traffic.pattern: read the description {value!r} as {found} (its details, such "
            "as when the peaks come, are not used; state peak_rps for the size of the peak)")
        return found


_UNSET = object()


def _example(unit: Unit) -> str:
    return {"ms": ", e.g. 50 or '50 ms'", "rps": ", e.g. 20 or '20 req/s'",
            "usd": ", e.g. 0.05", "count": ", e.g. 128"}.get(unit, "")


def _update(data: dict[str, Any], path: tuple[str, ...], fn: Callable[[Any], Any]) -> None:
    node: Any = data
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
        if node is None:
            return
    if not isinstance(node, dict) or path[-1] not in node:
        return
    new = fn(node[path[-1]])
    if new is _UNSET:
        del node[path[-1]]
    else:
        node[path[-1]] = new
