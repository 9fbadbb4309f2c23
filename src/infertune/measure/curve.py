"""Service-time curve: latency and throughput of ``forward`` by batch size (and, for text
models, by sequence length). The batching simulator and the optimize search read it through
``ServiceCurve.latency_ms(batch_size, seq_len)``.

Interpolation rule: piecewise-linear in batch size, then piecewise-linear in sequence length.
Beyond the largest measured batch or length the last segment's slope is extended (latency
keeps growing, never flattens); below the smallest measured length the smallest is used (a
conservative floor); a batch below the smallest measured batch scales along the first segment.
With one measured batch size, latency scales in proportion to the batch (no batching gain is
assumed). Every point in ``points`` is measured; ``unmeasured`` lists grid points the time
budget left out, which ``latency_ms`` answers by the rules above.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infertune.models.adapter import Adapter, ModelInputs
from infertune.serial import Serial

DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)


@dataclass
class CurvePoint(Serial):
    batch_size: int
    seq_len: int | None
    p50_ms: float
    p95_ms: float
    mean_ms: float
    samples: int
    throughput_per_s: float  # items per second at p50: batch_size / p50


@dataclass
class ServiceCurve(Serial):
    points: list[CurvePoint]
    typical_seq_len: int | None = None  # the length used when a caller passes seq_len=None
    runtime: str = ""
    note: str = field(default="forward only; p50 of repeated calls on this machine")
    # (batch, seq_len) pairs of the requested grid left unmeasured when the time budget ran
    # out; latency_ms answers for them by interpolation/extension from the measured points.
    unmeasured: list[tuple[int, int | None]] = field(default_factory=list)

    DERIVED = ("unit",)  # written for a reader of the file; every figure here is in ms

    def __post_init__(self) -> None:
        if not self.points:
            raise ValueError("a service curve needs at least one measured point")

    @property
    def unit(self) -> str:
        return "ms"

    @property
    def batch_sizes(self) -> list[int]:
        return sorted({p.batch_size for p in self.points})

    @property
    def seq_lens(self) -> list[int | None]:
        lens = {p.seq_len for p in self.points}
        known = sorted(n for n in lens if n is not None)
        return list(known) if None not in lens else [None]

    def latency_ms(self, batch_size: int, seq_len: int | None = None) -> float:
        """p50 forward latency for ``batch_size`` items of ``seq_len`` tokens (interpolated)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        lens = [n for n in self.seq_lens if n is not None]
        if not lens:  # a tensor model's curve: batch size only
            return _interp_batch(self._row(None), batch_size)
        length = seq_len if seq_len is not None else (self.typical_seq_len or lens[0])
        per_len = [(lv, _interp_batch(self._row(lv), batch_size)) for lv in lens]
        return max(_interp_extend([float(x) for x, _ in per_len], [y for _, y in per_len],
                                  float(length), floor_left=True), 1e-6)

    def throughput_per_s(self, batch_size: int, seq_len: int | None = None) -> float:
        return batch_size / (self.latency_ms(batch_size, seq_len) / 1000.0)

    def _row(self, seq_len: int | None) -> list[tuple[int, float]]:
        return sorted((p.batch_size, p.p50_ms) for p in self.points if p.seq_len == seq_len)


def _interp_batch(row: list[tuple[int, float]], batch_size: int) -> float:
    xs = [float(b) for b, _ in row]
    ys = [y for _, y in row]
    return max(_interp_extend(xs, ys, float(batch_size), floor_left=False), 1e-6)


def _interp_extend(xs: list[float], ys: list[float], x: float, *, floor_left: bool) -> float:
    if len(xs) == 1:
        return ys[0] * (x / xs[0] if not floor_left else 1.0)
    if x <= xs[0]:
        if floor_left:
            return ys[0]
        slope = (ys[1] - ys[0]) / (xs[1] - xs[0])
        return ys[0] + slope * (x - xs[0])
    if x >= xs[-1]:
        slope = max((ys[-1] - ys[-2]) / (xs[-1] - xs[-2]), 0.0)
        return ys[-1] + slope * (x - xs[-1])
    return float(np.interp(x, xs, ys))


def seq_lens_from_lengths(token_lengths: Sequence[int], max_length: int | None) -> list[int]:
    """Lengths to measure: the data's median, 90th percentile and longest (after truncation)."""
    arr = np.asarray(token_lengths, dtype=np.int64)
    if max_length:
        arr = np.minimum(arr, max_length)
    picks = {int(np.percentile(arr, 50, method="inverted_cdf")),
             int(np.percentile(arr, 90, method="inverted_cdf")), int(arr.max())}
    return sorted(picks)


def synthetic_text_feeds(template: ModelInputs, token_stream: np.ndarray, batch_size: int,
                         seq_len: int) -> ModelInputs:
    """(batch, seq_len) feeds cut from real token ids: every position attended, so the cost is
    that of ``seq_len`` real tokens."""
    need = batch_size * seq_len
    reps = -(-need // max(token_stream.size, 1))
    ids = np.tile(token_stream, reps)[:need].reshape(batch_size, seq_len)
    feeds: ModelInputs = {}
    for name, arr in template.items():
        if name == "input_ids":
            feeds[name] = ids.astype(arr.dtype)
        elif name == "attention_mask":
            feeds[name] = np.ones((batch_size, seq_len), dtype=arr.dtype)
        else:
            feeds[name] = np.zeros((batch_size, seq_len), dtype=arr.dtype)
    return feeds


def time_forward(forward: Callable[[ModelInputs], Any], feeds: ModelInputs, *, repeats: int,
                 max_seconds: float, min_repeats: int = 2,
                 clock: Callable[[], float] = time.perf_counter) -> list[float]:
    """One untimed warm call, then up to ``repeats`` timed calls (ms), stopping after
    ``max_seconds`` once ``min_repeats`` are in."""
    forward(feeds)
    out: list[float] = []
    start = clock()
    while len(out) < repeats:
        t0 = clock()
        forward(feeds)
        out.append((clock() - t0) * 1000.0)
        if len(out) >= min_repeats and clock() - start >= max_seconds:
            break
    return out


def measure_curve(adapter: Adapter, data: Sequence[Any], *,
                  batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
                  seq_lens: Sequence[int] | None = None, typical_seq_len: int | None = None,
                  repeats: int = 10,
                  max_seconds_per_point: float = 1.0, budget_s: float | None = None,
                  clock: Callable[[], float] = time.perf_counter,
                  on_point: Callable[[int, int | None], None] | None = None) -> ServiceCurve:
    """Measure forward latency on a grid of batch sizes (x sequence lengths for text).
    ``typical_seq_len`` (default: the shortest of ``seq_lens``, which is the data's median
    when they come from ``seq_lens_from_lengths``) answers ``latency_ms(b, None)``."""
    text = adapter.info.kind == "text" and seq_lens
    lengths: list[int | None] = list(seq_lens) if text and seq_lens else [None]
    grid: list[tuple[int, int | None]] = [(b, s) for s in lengths for b in batch_sizes]
    stream = template = None
    if text:
        template = adapter.preprocess(list(data[:2]))
        chunks = [adapter.preprocess([t])["input_ids"][0] for t in data[:64]]
        stream = np.concatenate(chunks)
    points: list[CurvePoint] = []
    unmeasured: list[tuple[int, int | None]] = []
    start = clock()
    for b, s in grid:
        # The typical length's row (the first) is always measured in full; longer lengths
        # stop when the budget is spent, and the points left out are listed, not invented.
        if (budget_s is not None and s != grid[0][1] and clock() - start >= budget_s):
            unmeasured.append((b, s))
            continue
        if text:
            assert template is not None and stream is not None and s is not None
            feeds = synthetic_text_feeds(template, stream, b, s)
        else:
            feeds = adapter.preprocess([data[i % len(data)] for i in range(b)])
        times = np.asarray(time_forward(adapter.forward, feeds, repeats=repeats,
                                        max_seconds=max_seconds_per_point, clock=clock))
        p50 = float(np.median(times))
        points.append(CurvePoint(batch_size=b, seq_len=s, p50_ms=p50,
                                 p95_ms=float(np.percentile(times, 95)),
                                 mean_ms=float(times.mean()), samples=int(times.size),
                                 throughput_per_s=b / (p50 / 1000.0)))
        if on_point is not None:
            on_point(b, s)
    typical = None
    if text and seq_lens:
        typical = typical_seq_len if typical_seq_len is not None else sorted(seq_lens)[0]
    return ServiceCurve(points=points, typical_seq_len=typical, runtime=adapter.info.runtime,
                        unmeasured=unmeasured)
