"""Caching and input options, measured where the data allows.

- Response cache: the hit rate the held-out (or trace) inputs would give if replayed in order
  through a cache, for exact repeats and for normalised-text repeats (case, Unicode form,
  whitespace and surrounding punctuation folded). This is a count on the user's data, not a
  timing; it says nothing about production traffic unless the data was sampled from it.
- Input trimming: the max length that keeps 99% of the inputs whole, the share it would cut,
  and its latency effect measured with interleaved trials against the current max length.
- Length bucketing: batches formed from length-sorted requests against batches in arrival
  order, both padded to their longest member; per-request forward time, measured interleaved.
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infertune.serial import Serial

_SPACES = re.compile(r"\s+")
_EDGE_PUNCT = re.compile(r"^[\W_]+|[\W_]+$")


def normalise_text(text: str) -> str:
    """The key a normalising cache would use: NFKC, lower case, single spaces, no edge
    punctuation ('  Reset my PASSWORD?' and 'reset my password' share one key)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _EDGE_PUNCT.sub("", _SPACES.sub(" ", folded).strip())


def hit_rate(keys: Sequence[Any], capacity: int | None = None) -> float:
    """Share of ``keys`` that a cache replayed in order would answer: a key is a hit when seen
    before (and, with ``capacity``, still inside an LRU of that many entries)."""
    if not keys:
        return 0.0
    lru: OrderedDict[Any, None] = OrderedDict()
    hits = 0
    for key in keys:
        if key in lru:
            hits += 1
            lru.move_to_end(key)
            continue
        lru[key] = None
        if capacity is not None and len(lru) > capacity:
            lru.popitem(last=False)
    return hits / len(keys)


@dataclass
class CacheEstimate(Serial):
    requests: int
    exact_hit_rate: float
    normalised_hit_rate: float
    lru_capacity: int | None
    lru_exact_hit_rate: float | None
    source: str  # what the inputs were: "held-out data <path>" or "trace <path>"


def cache_estimate(inputs: Sequence[Any], source: str,
                   lru_capacity: int | None = 4096) -> CacheEstimate:
    """Hit rates for text inputs; other inputs are keyed by their bytes (exact only)."""
    exact = [_key(x) for x in inputs]
    normal = [normalise_text(x) if isinstance(x, str) else _key(x) for x in inputs]
    return CacheEstimate(
        requests=len(inputs), exact_hit_rate=hit_rate(exact),
        normalised_hit_rate=hit_rate(normal), lru_capacity=lru_capacity,
        lru_exact_hit_rate=hit_rate(exact, lru_capacity) if lru_capacity else None,
        source=source)


def _key(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return (value.shape, str(value.dtype), value.tobytes())
    return value


@dataclass
class TimedOption(Serial):
    """A measured latency change: option B against the current setting A (ms per request)."""

    name: str
    a_label: str
    b_label: str
    a_p50_ms: float
    b_p50_ms: float
    a_p95_ms: float
    b_p95_ms: float
    ratio_p95: float
    ratio_p95_low: float
    ratio_p95_high: float
    verdict: str
    samples: int  # per side
    detail: str = ""


@dataclass
class InputOptions(Serial):
    # defaults: a record written without a field reads it as not measured
    cache: CacheEstimate | None = None
    trim_length: int | None = None
    truncated_share: float | None = None
    trimming: TimedOption | None = None
    bucketing: TimedOption | None = None
    notes: list[str] = field(default_factory=list)


def trim_length_for(lengths: Sequence[int], keep: float = 0.99,
                    multiple: int = 8) -> tuple[int, float]:
    """The smallest length (rounded up to ``multiple``) that keeps ``keep`` of the inputs
    whole, and the share of inputs it would cut."""
    arr = np.sort(np.asarray(lengths))
    idx = min(len(arr) - 1, int(np.ceil(keep * len(arr))) - 1)
    length = int(-(-int(arr[max(idx, 0)]) // multiple) * multiple)
    return length, float(np.mean(arr > length))


Compare = Callable[..., Any]  # measure.compare.run_interleaved


def measure_trimming(adapter: Any, texts: Sequence[str], trim_length: int, *,
                     compare: Compare, budget_s: float, seed: int = 0) -> TimedOption:
    """Batch-1 latency at the adapter's current max length (A) against ``trim_length`` (B)."""
    trimmed = dataclasses.replace(adapter, pre=dataclasses.replace(adapter.pre,
                                                                   max_length=trim_length))
    requests = [[t] for t in texts]
    result = compare(adapter.predict, trimmed.predict, requests, budget_s=budget_s,
                     block_size=10, min_trials=3, warmup=3, seed=seed, target_block_s=1.0,
                     names=(f"max_length {adapter.pre.max_length}", f"max_length {trim_length}"))
    return _timed("input trimming", result, f"trim to {trim_length} tokens")


def measure_bucketing(adapter: Any, texts: Sequence[str], lengths: Sequence[int], *,
                      compare: Compare, budget_s: float, batch: int = 8,
                      seed: int = 0) -> TimedOption:
    """Batches in arrival order (A) against length-sorted batches (B), same requests."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(texts))
    arrival = [[texts[i] for i in order[s:s + batch]] for s in range(0, len(order), batch)]
    by_len = sorted(order, key=lambda i: lengths[i])
    bucketed = [[texts[i] for i in by_len[s:s + batch]] for s in range(0, len(by_len), batch)]
    arrival = [b for b in arrival if len(b) == batch]
    bucketed = [b for b in bucketed if len(b) == batch]
    n = min(len(arrival), len(bucketed))
    if n < 2:
        raise ValueError(f"length bucketing needs at least {2 * batch} inputs")
    # Pair the i-th arrival batch with the i-th bucketed batch: each side sees all its own
    # batches; the per-call time is compared on the same number of requests.
    pairs = [(arrival[i], bucketed[i]) for i in rng.permutation(n)]
    requests = [[i] for i in range(len(pairs))]

    def run_a(req: Sequence[int]) -> Any:
        return adapter.predict(pairs[req[0]][0])

    def run_b(req: Sequence[int]) -> Any:
        return adapter.predict(pairs[req[0]][1])

    result = compare(run_a, run_b, requests, budget_s=budget_s, block_size=5, min_trials=3,
                     warmup=2, seed=seed, target_block_s=1.0,
                     names=("arrival order", "length-sorted"))
    return _timed("length bucketing", result,
                  f"batches of {batch}, padded to their longest member; time per batch")


def _timed(name: str, result: Any, detail: str) -> TimedOption:
    p95 = result.stats.p95
    return TimedOption(name=name, a_label=result.a, b_label=result.b,
                       a_p50_ms=result.a_summary.p50, b_p50_ms=result.b_summary.p50,
                       a_p95_ms=result.a_summary.p95, b_p95_ms=result.b_summary.p95,
                       ratio_p95=p95.ratio, ratio_p95_low=p95.low, ratio_p95_high=p95.high,
                       verdict=p95.verdict, samples=min(result.stats.n_a, result.stats.n_b),
                       detail=detail)
