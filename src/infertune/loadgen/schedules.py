"""Arrival schedules: seeded, precomputed arrays of intended send offsets (seconds from the
start of a test), so a load test is reproducible and its shape can be inspected before a single
request is sent.

    constant   one request every 1/rate seconds
    poisson    exponential gaps (squared CV of gaps = 1)
    gamma      gamma gaps with shape b = burstiness (b = 1 is Poisson, b < 1 burstier;
               squared CV of gaps = 1/b), mean gap 1/rate
    onoff      Markov-modulated Poisson: alternating exponential "gap" periods at the base rate
               and "burst" periods at the peak rate (mean lengths gap_s and burst_s)
    ramp       rate rising (or falling) linearly from ``rate`` to ``peak_rate`` over the test,
               evenly spaced in cumulative intensity
    trace      replay a file of timestamps or inter-arrival gaps (CSV or JSON Lines),
               optionally sped up by ``trace_scale`` (2.0 = twice the rate)

``build_schedule(spec)`` looks the shape up in SHAPES (a name -> builder registry) and raises a
ConfigError naming the known shapes when the name is unknown.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from infertune.durations import parse_duration as parse_duration  # re-exported for loadgen callers
from infertune.errors import ConfigError, DataError
from infertune.jsonfile import read_jsonl
from infertune.serial import Serial


@dataclass(frozen=True)
class ScheduleSpec(Serial):
    """What a user asks for; checked when built (rate and lengths must be positive)."""

    shape: str = "poisson"
    rate: float = 10.0  # mean rate (constant, poisson, gamma); base rate (onoff); start (ramp)
    duration_s: float | None = 10.0  # None only for trace: the trace's own length
    seed: int = 0
    burstiness: float = 1.0  # gamma shape b
    peak_rate: float | None = None  # onoff peak rate; ramp end rate
    burst_s: float = 2.0  # onoff mean burst length
    gap_s: float = 8.0  # onoff mean gap length
    trace: Path | None = None
    trace_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.shape != "trace" and not self.rate > 0:
            raise ConfigError(f"rate must be > 0 requests per second, got {self.rate}; "
                              "pass --rate with a positive number")
        if self.duration_s is not None and not self.duration_s > 0:
            raise ConfigError(f"duration must be > 0 seconds, got {self.duration_s}; "
                              "pass --duration like 30s or 2m")
        for name in ("burstiness", "burst_s", "gap_s", "trace_scale"):
            value = getattr(self, name)
            if not value > 0:
                raise ConfigError(f"{name} must be > 0, got {value}")
        if self.peak_rate is not None and not self.peak_rate > 0:
            raise ConfigError(f"peak rate must be > 0, got {self.peak_rate}; pass --peak-rate")


@dataclass(frozen=True)
class ScheduleStats(Serial):
    count: int
    duration_s: float
    mean_rate: float  # count / duration
    peak_1s_rate: float  # most arrivals in any 1-second window (sliding)
    gap_scv: float  # squared coefficient of variation of inter-arrival gaps


@dataclass(frozen=True)
class Schedule:
    spec: ScheduleSpec
    offsets_s: np.ndarray = field(repr=False)  # sorted intended send offsets, seconds
    duration_s: float

    def __len__(self) -> int:
        return int(self.offsets_s.size)

    @property
    def target_rate(self) -> float:
        return len(self) / self.duration_s

    def stats(self) -> ScheduleStats:
        return schedule_stats(self.offsets_s, self.duration_s)


def schedule_stats(offsets: np.ndarray, duration_s: float) -> ScheduleStats:
    n = int(offsets.size)
    gaps = np.diff(offsets)
    if gaps.size >= 2 and gaps.mean() > 0:
        scv = float(gaps.var() / gaps.mean() ** 2)
    else:
        scv = 0.0
    # Sliding 1-second window anchored at each arrival: arrivals in [t, t + 1).
    if n:
        # 1e-9 s below a full second, so float rounding never lets a window hold 1 s + 1 gap.
        ends = np.searchsorted(offsets, offsets + (1.0 - 1e-9), side="left")
        peak = float((ends - np.arange(n)).max())
    else:
        peak = 0.0
    return ScheduleStats(count=n, duration_s=float(duration_s), mean_rate=n / duration_s,
                         peak_1s_rate=peak, gap_scv=scv)


Builder = Callable[[ScheduleSpec, np.random.Generator], tuple[np.ndarray, float]]


def _duration(spec: ScheduleSpec) -> float:
    if spec.duration_s is None:
        raise ConfigError(f"shape {spec.shape!r} needs a duration; pass --duration like 60s")
    return spec.duration_s


def _renewal(gap_draw: Callable[[int], np.ndarray], rate: float, duration: float) -> np.ndarray:
    """Cumulative sums of random gaps, drawn in chunks until they pass the duration."""
    chunk = int(rate * duration + 6 * math.sqrt(rate * duration * 4) + 64)
    parts: list[np.ndarray] = []
    last = 0.0
    while last < duration:
        times = last + np.cumsum(gap_draw(chunk))
        parts.append(times)
        last = float(times[-1])
    times = np.concatenate(parts)
    # The first arrival is at t = 0 + one gap, as in a stationary process started at 0.
    return times[times < duration]


def _constant(spec: ScheduleSpec, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    duration = _duration(spec)
    n = int(math.ceil(duration * spec.rate - 1e-9))
    return np.arange(n, dtype=np.float64) / spec.rate, duration


def _poisson(spec: ScheduleSpec, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    duration = _duration(spec)
    return _renewal(lambda k: rng.exponential(1.0 / spec.rate, k), spec.rate, duration), duration


def _gamma(spec: ScheduleSpec, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    duration = _duration(spec)
    b = spec.burstiness
    def draw(k: int) -> np.ndarray:  # mean gap 1/rate, squared CV 1/b
        return rng.gamma(b, 1.0 / (spec.rate * b), k)

    return _renewal(draw, spec.rate, duration), duration


def _onoff(spec: ScheduleSpec, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    duration = _duration(spec)
    if spec.peak_rate is None:
        raise ConfigError("shape 'onoff' needs a peak rate; pass --peak-rate (above --rate)")
    parts: list[np.ndarray] = []
    t, bursting = 0.0, False  # start in a gap at the base rate
    while t < duration:
        length = rng.exponential(spec.burst_s if bursting else spec.gap_s)
        end = min(t + length, duration)
        rate = spec.peak_rate if bursting else spec.rate
        count = rng.poisson(rate * (end - t))
        # Given its count, a Poisson process's arrivals in a period are uniform in it.
        parts.append(np.sort(rng.uniform(t, end, count)))
        t, bursting = end, not bursting
    return np.concatenate(parts) if parts else np.empty(0), duration


def _ramp(spec: ScheduleSpec, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    duration = _duration(spec)
    if spec.peak_rate is None:
        raise ConfigError("shape 'ramp' needs an end rate; pass --peak-rate")
    r0, r1 = spec.rate, spec.peak_rate
    slope = (r1 - r0) / duration
    total = r0 * duration + slope * duration**2 / 2  # cumulative intensity at the end
    k = np.arange(int(math.floor(total)), dtype=np.float64)
    if abs(slope) < 1e-12:
        return k / r0, duration
    # Invert the cumulative intensity r0 t + slope t^2 / 2 = k.
    times = (-r0 + np.sqrt(r0**2 + 2 * slope * k)) / slope
    return times[times < duration], duration


def _trace(spec: ScheduleSpec, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    if spec.trace is None:
        raise ConfigError("shape 'trace' needs a file; pass --trace with a .csv or .jsonl file")
    offsets = read_trace(spec.trace) / spec.trace_scale
    if spec.duration_s is not None:
        return offsets[offsets < spec.duration_s], spec.duration_s
    span, n = float(offsets[-1]), int(offsets.size)
    # The trace's own window: first arrival to one mean gap after the last, so the mean rate
    # is (n - 1) / span, the rate of its n - 1 gaps. A trace of one instant gets 1 s.
    return offsets, span * n / (n - 1) if span > 0 else 1.0


SHAPES: dict[str, Builder] = {
    "constant": _constant,
    "poisson": _poisson,
    "gamma": _gamma,
    "onoff": _onoff,
    "ramp": _ramp,
    "trace": _trace,
}


def build_schedule(spec: ScheduleSpec, shapes: dict[str, Builder] | None = None) -> Schedule:
    """The schedule ``spec`` describes; an unknown shape is a ConfigError naming the known."""
    registry = SHAPES if shapes is None else shapes
    builder = registry.get(spec.shape)
    if builder is None:
        raise ConfigError(f"unknown traffic shape {spec.shape!r}; use one of "
                          f"{', '.join(sorted(registry))}")
    offsets, duration = builder(spec, np.random.default_rng(spec.seed))
    return Schedule(spec=spec, offsets_s=np.asarray(offsets, dtype=np.float64),
                    duration_s=float(duration))


_TIME_KEYS = ("timestamp", "ts", "time", "t")
_GAP_KEYS = ("gap", "interarrival", "inter_arrival", "gap_s")


def read_trace(path: Path) -> np.ndarray:
    """Offsets (seconds from the first request) from a trace file.

    CSV: a column named timestamp/ts/time or gap/interarrival (a single unnamed numeric
    column is read as timestamps). JSON Lines: one number per line (timestamps) or objects
    with one of those keys. Timestamps must never decrease; gaps must be >= 0.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"trace file {path} not found; pass --trace with a .csv or .jsonl file")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        values, kind = _read_trace_jsonl(path)
    elif suffix in (".csv", ".txt"):
        values, kind = _read_trace_csv(path)
    else:
        raise DataError(f"{path}: unknown trace format {suffix!r}; use .csv or .jsonl")
    if values.size == 0:
        raise DataError(f"{path}: the trace has no requests")
    if not np.all(np.isfinite(values)):
        raise DataError(f"{path}: the trace holds a value that is not a finite number")
    if kind == "gap":
        bad = np.flatnonzero(values < 0)
        if bad.size:
            raise DataError(f"{path}: gap at entry {bad[0] + 1} is negative ({values[bad[0]]}); "
                            "inter-arrival gaps must be >= 0")
        return np.cumsum(values) - values[0]
    back = np.flatnonzero(np.diff(values) < 0)
    if back.size:
        i = int(back[0])
        raise DataError(f"{path}: timestamps go backwards at entry {i + 2} ({values[i + 1]} after "
                        f"{values[i]}); sort the trace by time")
    return values - values[0]


def _read_trace_jsonl(path: Path) -> tuple[np.ndarray, str]:
    values: list[float] = []
    kind = "timestamp"
    fix = ("write one number per line, or an object with one of the keys "
           f"{', '.join(_TIME_KEYS + _GAP_KEYS)}")
    for lineno, item in read_jsonl(path, fix=fix, error=DataError):
        if isinstance(item, dict):
            key = next((k for k in _TIME_KEYS + _GAP_KEYS if k in item), None)
            if key is None:
                raise DataError(f"{path}: line {lineno} has none of the keys "
                                f"{', '.join(_TIME_KEYS + _GAP_KEYS)}")
            kind = "gap" if key in _GAP_KEYS else "timestamp"
            item = item[key]
        values.append(_number(item, path, lineno))
    return np.asarray(values, dtype=np.float64), kind


def _read_trace_csv(path: Path) -> tuple[np.ndarray, str]:
    rows = [r for r in csv.reader(path.read_text().splitlines()) if r and any(c.strip() for c in r)]
    if not rows:
        return np.empty(0), "timestamp"
    header = [c.strip().lower() for c in rows[0]]
    column, kind, body, first_line = 0, "timestamp", rows, 1
    try:
        float(header[0])
    except ValueError:
        key = next((k for k in _TIME_KEYS + _GAP_KEYS if k in header), None)
        if key is None:
            raise DataError(f"{path}: no column named {', '.join(_TIME_KEYS + _GAP_KEYS)}; "
                            "name the time column 'timestamp' or 'gap'") from None
        column, kind = header.index(key), "gap" if key in _GAP_KEYS else "timestamp"
        body, first_line = rows[1:], 2
    values = [_number(r[column] if column < len(r) else "", path, i)
              for i, r in enumerate(body, start=first_line)]
    return np.asarray(values, dtype=np.float64), kind


def _number(value: Any, path: Path, lineno: int) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise DataError(f"{path}: line {lineno}: {value!r} is not a number") from None
