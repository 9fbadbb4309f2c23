"""One way to write a duration, for every command: ``500ms``, ``30s``, ``90`` (seconds),
``2m`` or ``2min``, ``1.5h``. Whitespace between number and unit is allowed, case is not
significant; anything else, zero or negative is one ConfigError line naming the option."""

from __future__ import annotations

import re

from infertune.errors import ConfigError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|sec|m|min|h)?\s*$", re.IGNORECASE)
_SECONDS_PER_UNIT = {"ms": 1e-3, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str, option: str = "duration") -> float:
    """Seconds in ``text``; ``option`` names the flag in the error (e.g. ``--budget``)."""
    match = _DURATION.match(text)
    if match is None:
        raise ConfigError(f"{option} {text!r} is not a duration; write it like 500ms, 30s, 2m "
                          "or 1h")
    unit = (match.group(2) or "s").lower()
    seconds = float(match.group(1)) * _SECONDS_PER_UNIT[unit]
    if seconds <= 0:
        raise ConfigError(f"{option} must be > 0, got {text!r}; write it like 30s or 2m")
    return seconds
