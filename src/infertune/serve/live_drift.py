"""Live input drift: each answered row's summary features, compared with the release's
reference by the population stability index, exported as ``infertune_drift_psi{feature}``.

    features    input_size    characters of a text (summed over a pair's texts), elements of
                              a tensor row
                input_mean    mean of a numeric row (tensor models)
                output_norm   L2 norm of a numeric output row (embeddings, logits)
    reference   the first ``reference_rows`` rows the release answers (after warm-up): the
                bin edges are that sample's deciles, fixed from then on
    window      the latest ``window_rows`` rows; PSI is recomputed every ``every`` rows
    PSI         sum over bins of (w - r) ln(w / r), shares floored at 1e-4; the usual reading
                (a convention of credit-scoring practice, not derived here): < 0.1 stable,
                0.1-0.25 moderate, > 0.25 a shift worth an alert (serve/alerts.py). From
                samples, an unshifted window's PSI is not 0: about (bins - 1) x (1/reference
                + 1/window), 0.036 with the default 500 and 500 rows (0.09 with 200 and 200)

A feature that is constant in the reference (a fixed-length tensor's input_size) has one bin
and no PSI. The monitor runs on the event loop after the answer is built; a row it cannot
read (no number in it) is skipped, never an error.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

FEATURES = ("input_size", "input_mean", "output_norm")
SHARE_FLOOR = 1e-4
ALERT_PSI = 0.25  # the convention's "significant shift"


@dataclass
class _Feature:
    reference: list[float] = field(default_factory=list)
    edges: np.ndarray | None = None
    ref_shares: np.ndarray | None = None
    window: deque[float] = field(default_factory=deque)


def psi(reference_shares: np.ndarray, current_shares: np.ndarray) -> float:
    r = np.maximum(reference_shares, SHARE_FLOOR)
    w = np.maximum(current_shares, SHARE_FLOOR)
    return float(np.sum((w - r) * np.log(w / r)))


def _shares(values: Sequence[float], edges: np.ndarray) -> np.ndarray:
    counts = np.bincount(np.searchsorted(edges, np.asarray(values), side="right"),
                         minlength=len(edges) + 1)
    shares: np.ndarray = counts / max(1, int(counts.sum()))
    return shares


class DriftMonitor:
    """Feed it answered rows; ``publish(feature, psi)`` receives each recomputed PSI."""

    def __init__(self, publish: Callable[[str, float], None], *, reference_rows: int = 500,
                 window_rows: int = 500, every: int = 20) -> None:
        self.publish = publish
        self.reference_rows, self.window_rows, self.every = reference_rows, window_rows, every
        self.features = {name: _Feature(window=deque(maxlen=window_rows)) for name in FEATURES}
        self.seen = 0
        self.last: dict[str, float] = {}

    def observe(self, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        for row_in, row_out in zip(inputs, outputs, strict=False):
            self._add("input_size", _size(row_in))
            self._add("input_mean", _mean(row_in))
            self._add("output_norm", _norm(row_out))
            self.seen += 1
            if self.seen % self.every == 0:
                self._recompute()

    def _add(self, name: str, value: float | None) -> None:
        if value is None or not math.isfinite(value):
            return
        f = self.features[name]
        if f.edges is None:
            f.reference.append(value)
            if len(f.reference) >= self.reference_rows:
                self._fix_reference(f)
            return
        f.window.append(value)

    def _fix_reference(self, f: _Feature) -> None:
        ref = np.asarray(f.reference)
        # a constant reference has no bins to compare (edges empty: skipped from then on)
        edges = (np.unique(np.quantile(ref, np.linspace(0.1, 0.9, 9))) if np.ptp(ref) > 0
                 else np.array([]))
        f.edges = edges
        f.ref_shares = _shares(f.reference, edges)

    def _recompute(self) -> None:
        for name, f in self.features.items():
            if f.edges is None or f.ref_shares is None or len(f.edges) == 0 or \
                    len(f.window) < self.window_rows // 2:
                continue  # no reference yet, a constant feature, or too few rows
            value = psi(f.ref_shares, _shares(list(f.window), f.edges))
            self.last[name] = value
            self.publish(name, value)


def _numbers(value: Any) -> np.ndarray | None:
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return array if array.size else None


def _size(row: Any) -> float | None:
    if isinstance(row, str):
        return float(len(row))
    if isinstance(row, dict):  # a pair input: its texts together
        texts = [v for v in row.values() if isinstance(v, str)]
        return float(sum(len(t) for t in texts)) if texts else None
    array = _numbers(row)
    return float(array.size) if array is not None else None


def _mean(row: Any) -> float | None:
    if isinstance(row, (str, dict)):
        return None
    array = _numbers(row)
    return float(array.mean()) if array is not None else None


def _norm(row: Any) -> float | None:
    if isinstance(row, dict):
        row = next((v for v in row.values() if not isinstance(v, str)), None)
    array = _numbers(row)
    return float(np.linalg.norm(array)) if array is not None else None
