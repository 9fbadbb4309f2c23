"""A latency percentile's confidence interval, and the verdict against a target it allows.

The interval is the hull of two intervals at one confidence (95% unless asked), because
either alone is too narrow somewhere:

- the distribution-free order-statistic interval [x_(l), x_(u)] (l, u from Binomial(n, q)): it
  needs no model of the latencies and widens as the tail thins; with too few samples for the
  tail it has no upper bound at all (a p99 from fewer than 368 answers cannot be bounded above
  at 97.5%), so "meets" is then impossible, as it should be;
- a block bootstrap over time blocks of the run (``block_s``, at least the traffic's burst
  scale): latencies inside one burst move together, so the i.i.d. interval above treats a burst
  of 40 slow answers as 40 independent facts; resampling whole blocks does not.

``verdict`` reads the interval against the target: "meets" only when it lies wholly below,
"misses" only when it lies wholly above, else "not shown"; and "not shown" whatever the interval
when the run held fewer than MIN_BLOCKS blocks (a calm stretch, or one burst, is not the
traffic).

    tail_interval(latencies, starts, q, block_s) -> TailInterval
    verdict(interval, target) -> ("meets" | "misses" | "not shown", why)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from infertune.measure.summary import quantile_sorted
from infertune.serial import Serial

CONFIDENCE = 0.95
MIN_BLOCKS = 10  # fewer time blocks and the run saw too few bursts to stand for the traffic
N_BOOT = 400  # block resamples at 95%: each end of the interval stands on 10 draws; a higher
# confidence takes proportionally more (n_boot_for), so each end still stands on 10

Verdict = Literal["meets", "misses", "not shown"]


@dataclass(frozen=True)
class TailInterval(Serial):
    """The q-quantile of the answered latencies (ms) with its interval at ``confidence``;
    ``high`` None: no upper bound (too few answers in the tail), ``low`` None: no lower bound."""

    q: float
    value: float
    low: float | None
    high: float | None
    samples: int  # answered requests the percentile is taken over
    blocks: int  # time blocks of ``block_s`` holding at least one answer
    block_s: float
    confidence: float = CONFIDENCE  # a file written before the confidence was recorded: 95%

    @property
    def in_tail(self) -> int:
        """Answers above the percentile: what the tail figure stands on."""
        return int(math.floor(self.samples * (1.0 - self.q) + 1e-9))


def n_boot_for(confidence: float) -> int:
    """Bootstrap draws for an interval at ``confidence``: N_BOOT at 95%, scaled so each end of
    the interval stands on as many draws at any confidence."""
    return math.ceil(N_BOOT * (1.0 - CONFIDENCE) / (1.0 - confidence) - 1e-9)


def order_statistic_bounds(n: int, q: float,
                           confidence: float = CONFIDENCE) -> tuple[int | None, int | None]:
    """1-based ranks (l, u) with P(x_(l) <= the true q-quantile <= x_(u)) >= ``confidence``;
    None where no rank is far enough out (too few samples)."""
    alpha = (1.0 - confidence) / 2.0
    # P(x_(l) > xi) = P(Bin(n, q) < l) <= alpha; P(x_(u) < xi) = P(Bin(n, q) >= u) <= alpha
    low = int(stats.binom.ppf(alpha, n, q))
    high = int(stats.binom.ppf(1.0 - alpha, n, q)) + 1
    return (low if low >= 1 else None), (high if high <= n else None)


def tail_interval(latencies_ms: Sequence[float] | np.ndarray,
                  starts_s: Sequence[float] | np.ndarray, q: float, *, block_s: float,
                  seed: int = 0, confidence: float = CONFIDENCE,
                  n_boot: int | None = None) -> TailInterval:
    """The q-quantile of ``latencies_ms`` (answered requests; ``starts_s`` their intended send
    offsets, a later segment's offset past the earlier ones) and its interval at
    ``confidence`` (module docstring). ValueError on no latencies, mismatched lengths, a
    block_s <= 0 or a confidence outside (0, 1)."""
    lat = np.asarray(latencies_ms, dtype=np.float64)
    start = np.asarray(starts_s, dtype=np.float64)
    if (lat.size == 0 or lat.size != start.size or not block_s > 0 or not 0 < q < 1
            or not 0 < confidence < 1):
        raise ValueError("tail_interval: one start per latency, at least one, block_s > 0, "
                         "q and confidence in (0, 1)")
    ordered = np.sort(lat)
    n = int(ordered.size)
    lo_rank, hi_rank = order_statistic_bounds(n, q, confidence)
    low = float(ordered[lo_rank - 1]) if lo_rank is not None else None
    high = float(ordered[hi_rank - 1]) if hi_rank is not None else None
    block_ids = np.floor(start / block_s).astype(np.int64)
    groups = [lat[block_ids == b] for b in np.unique(block_ids)]
    if len(groups) >= 2:
        b_low, b_high = _block_bootstrap(groups, q, seed=seed, confidence=confidence,
                                         n_boot=n_boot or n_boot_for(confidence))
        low = None if low is None else min(low, b_low)
        high = None if high is None else max(high, b_high)
    return TailInterval(q=q, value=quantile_sorted(ordered, q), low=low, high=high, samples=n,
                        blocks=len(groups), block_s=block_s, confidence=confidence)


def _block_bootstrap(groups: list[np.ndarray], q: float, *, seed: int, confidence: float,
                     n_boot: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    draws = np.empty(n_boot)
    for i in range(n_boot):
        picked = rng.integers(0, len(groups), size=len(groups))
        pooled = np.sort(np.concatenate([groups[j] for j in picked]))
        draws[i] = quantile_sorted(pooled, q)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(draws, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def verdict(interval: TailInterval, target: float) -> tuple[Verdict, str]:
    """Meets / misses / not shown for ``interval`` against ``target`` ms, with the reason."""
    key = f"p{interval.q * 100:g}"
    shown = _interval_text(interval)
    if interval.blocks < MIN_BLOCKS:
        # a short run may have seen a calm stretch or one burst: neither stands for the traffic
        return "not shown", (f"{key} {shown}: the run held {interval.blocks} blocks of "
                             f"{interval.block_s:g} s (fewer than {MIN_BLOCKS}), too short for "
                             "the traffic's bursts")
    if interval.low is not None and interval.low > target:
        return "misses", f"{key} {shown} lies above the {target:g} ms target"
    if interval.high is None:
        return "not shown", (f"{key} from {interval.samples} answers ({interval.in_tail} in the "
                             f"tail) has no upper bound at {_pct(interval.confidence)}; too few "
                             "samples")
    if interval.high > target:
        return "not shown", f"{key} {shown} straddles the {target:g} ms target"
    return "meets", f"{key} {shown} lies below the {target:g} ms target"


def _interval_text(interval: TailInterval) -> str:
    low = f"{interval.low:.1f}" if interval.low is not None else "?"
    high = f"{interval.high:.1f}" if interval.high is not None else "unbounded"
    return (f"{interval.value:.1f} ms ({_pct(interval.confidence)} CI {low}-{high}, "
            f"n={interval.samples}, "
            f"{interval.blocks} x {interval.block_s:g} s blocks)")


def _pct(confidence: float) -> str:
    return f"{confidence * 100:g}%"
