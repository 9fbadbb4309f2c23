"""A/B latency comparison: pure statistics on two sample arrays, and a runner that collects
them with randomised interleaved blocks on one machine.

Verdict rule (DESIGN.md, "Comparisons"): with r = B/A and its bootstrap CI [lo, hi] (95% for
``compare_samples``; 99% in the runner, which looks repeatedly: see RUNNER_CONFIDENCE) and a
noise threshold t (default 2%): hi < 1 - t -> "B is faster"; lo > 1 + t -> "B is slower";
otherwise "no significant difference". The result is *conclusive* when it is a difference, or
when the whole CI lies inside [1 - t, 1 + t] (the samples rule out a change bigger than the
noise); an inconclusive result asks the runner for more trials while the budget lasts.
The p50 ratio decides the verdict; the p95 ratio gets its own verdict beside it.

The runner's samples come in blocks whose latency drifts with the machine's load; from
``MIN_BLOCK_TRIALS`` trials on, the CI resamples whole trials (paired A and B blocks) so that
drift widens it honestly instead of showing up as a false difference.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from infertune.measure.collector import steady_gc
from infertune.measure.summary import LatencySummary, quantile_sorted, sample_bootstrap_quantiles
from infertune.serial import Serial

Verdict = Literal["B is faster", "B is slower", "no significant difference"]
NOISE_THRESHOLD = 0.02
MIN_BLOCK_TRIALS = 8  # fewer trials give too few distinct block resamples for a CI
MIN_SAMPLES = 40  # per side, before the runner gives any verdict (a p95 needs a tail)
# The runner looks at its data repeatedly (after 8, 16, 32... trials) and stops at the first
# conclusive look; each look at 95% would inflate the false-alarm rate well past 5%, so the
# runner's CIs are 99% (a Bonferroni share of 5% over the ~5 looks a budget allows).
RUNNER_CONFIDENCE = 0.99


@dataclass
class RatioEstimate(Serial):
    percentile: float
    ratio: float  # B / A
    low: float
    high: float
    verdict: Verdict
    conclusive: bool
    confidence: float = 0.95


@dataclass
class ComparisonStats(Serial):
    DERIVED = ("verdict", "conclusive")

    n_a: int
    n_b: int
    p50: RatioEstimate
    p95: RatioEstimate
    threshold: float
    seed: int
    method: str = "bootstrap"  # "bootstrap" (independent samples) | "paired block bootstrap"

    @property
    def verdict(self) -> Verdict:
        return self.p50.verdict

    @property
    def conclusive(self) -> bool:
        return self.p50.conclusive


def decide(low: float, high: float, threshold: float) -> tuple[Verdict, bool]:
    if high < 1 - threshold:
        return "B is faster", True
    if low > 1 + threshold:
        return "B is slower", True
    return "no significant difference", (low >= 1 - threshold and high <= 1 + threshold)


def ratio_estimate(a_ms: np.ndarray, b_ms: np.ndarray, percentile: float, *, seed: int,
                   threshold: float = NOISE_THRESHOLD, n_boot: int = 4000,
                   confidence: float = 0.95) -> RatioEstimate:
    """Bootstrap CI of quantile(B)/quantile(A); A and B resampled independently."""
    a, b = np.sort(a_ms), np.sort(b_ms)
    q = percentile / 100
    rng = np.random.default_rng(seed)
    ratios = (sample_bootstrap_quantiles(b, q, n_boot, rng)
              / sample_bootstrap_quantiles(a, q, n_boot, rng))
    return _estimate(a, b, q, ratios, threshold, confidence)


def _estimate(a_sorted: np.ndarray, b_sorted: np.ndarray, q: float, ratios: np.ndarray,
              threshold: float, confidence: float) -> RatioEstimate:
    tail = (1 - confidence) / 2
    low, high = (float(v) for v in np.quantile(ratios, [tail, 1 - tail]))
    verdict, conclusive = decide(low, high, threshold)
    point = quantile_sorted(b_sorted, q) / quantile_sorted(a_sorted, q)
    return RatioEstimate(q * 100, point, low, high, verdict, conclusive, confidence)


def block_ratio_estimate(a_blocks: np.ndarray, b_blocks: np.ndarray, percentile: float, *,
                         seed: int, threshold: float = NOISE_THRESHOLD,
                         n_boot: int = 2000, confidence: float = 0.95) -> RatioEstimate:
    """Paired block bootstrap: ``a_blocks[i]`` and ``b_blocks[i]`` are trial i's blocks (shape
    trials x block_size). Whole trials are resampled, the same ones for A and B, so the CI
    carries the machine's block-to-block drift instead of pretending every sample is
    independent (which makes CIs too narrow on a noisy machine)."""
    q = percentile / 100
    rng = np.random.default_rng(seed)
    trials = a_blocks.shape[0]
    ratios = np.empty(n_boot)
    chunk = max(1, 2_000_000 // a_blocks.size)
    for start in range(0, n_boot, chunk):
        stop = min(start + chunk, n_boot)
        idx = rng.integers(0, trials, size=(stop - start, trials))
        qa = np.quantile(a_blocks[idx].reshape(stop - start, -1), q, axis=1,
                         method="inverted_cdf")
        qb = np.quantile(b_blocks[idx].reshape(stop - start, -1), q, axis=1,
                         method="inverted_cdf")
        ratios[start:stop] = qb / qa
    return _estimate(np.sort(a_blocks.ravel()), np.sort(b_blocks.ravel()), q, ratios,
                     threshold, confidence)


def compare_samples(a_ms: Sequence[float] | np.ndarray, b_ms: Sequence[float] | np.ndarray, *,
                    seed: int = 0, threshold: float = NOISE_THRESHOLD, n_boot: int = 4000,
                    block_size: int | None = None, confidence: float = 0.95) -> ComparisonStats:
    """Ratio B/A of the p50 and p95 with bootstrap CIs. Without ``block_size`` the samples are
    resampled independently; with it (the runner's blocks, in trial order, equal counts on
    both sides, at least ``MIN_BLOCK_TRIALS`` trials) whole trials are resampled in pairs."""
    a = np.asarray(a_ms, dtype=np.float64)
    b = np.asarray(b_ms, dtype=np.float64)
    if a.size < 2 or b.size < 2:
        raise ValueError("a comparison needs at least 2 samples on each side")
    if np.any(a <= 0) or np.any(b <= 0):
        raise ValueError("latencies must be positive to form a ratio")
    blocked = (block_size is not None and a.size == b.size and a.size % block_size == 0
               and a.size // block_size >= MIN_BLOCK_TRIALS)
    if blocked:
        assert block_size is not None
        a2, b2 = a.reshape(-1, block_size), b.reshape(-1, block_size)
        p50 = block_ratio_estimate(a2, b2, 50, seed=seed, threshold=threshold,
                                   confidence=confidence)
        p95 = block_ratio_estimate(a2, b2, 95, seed=seed + 1, threshold=threshold,
                                   confidence=confidence)
    else:
        p50 = ratio_estimate(a, b, 50, seed=seed, threshold=threshold, n_boot=n_boot,
                             confidence=confidence)
        p95 = ratio_estimate(a, b, 95, seed=seed + 1, threshold=threshold, n_boot=n_boot,
                             confidence=confidence)
    return ComparisonStats(n_a=int(a.size), n_b=int(b.size), p50=p50, p95=p95,
                           threshold=threshold, seed=seed,
                           method="paired block bootstrap" if blocked else "bootstrap")


@dataclass
class ComparisonResult(Serial):
    """What ``infertune compare`` reports; schema "infertune.compare/v1"."""

    DERIVED = ("verdict",)  # the p50 verdict, for a reader of the file

    a: str
    b: str
    stats: ComparisonStats
    a_summary: LatencySummary
    b_summary: LatencySummary
    trials: int
    block_size: int
    seconds: float
    budget_s: float
    stopped: str  # why sampling stopped: "conclusive" | "budget"
    order: list[str] = field(default_factory=list)  # block order actually run ("AB", "BA", ...)
    block_warmup: int = 0  # untimed calls at the start of each block
    # where the two sides ran: "each side in its own process" (pids: A's, B's) or "both in
    # one process" (the README says why that distorts the figures)
    where: str = "both in one process"
    pids: list[int] = field(default_factory=list)
    schema: str = "infertune.compare/v1"

    @property
    def verdict(self) -> Verdict:
        return self.stats.verdict


Call = Callable[[Sequence[Any]], Any]


def run_interleaved(call_a: Call, call_b: Call, requests: Sequence[Sequence[Any]], *,
                    budget_s: float = 60.0, block_size: int = 20,
                    min_trials: int = MIN_BLOCK_TRIALS, warmup: int = 5, seed: int = 0,
                    threshold: float = NOISE_THRESHOLD, target_block_s: float = 1.0,
                    clock: Callable[[], float] = time.perf_counter,
                    on_trial: Callable[[int, float], None] | None = None,
                    before_block: Callable[[str], None] | None = None,
                    block_warmup: int | None = None,
                    names: tuple[str, str] = ("A", "B"),
                    self_timed: bool = False) -> ComparisonResult:
    """Warm both, then trials of one A block and one B block in random order, until the
    verdict is conclusive or ``budget_s`` is spent. Looks happen at ``max(min_trials,
    MIN_BLOCK_TRIALS)`` trials and then each time the trial count doubles, once there are
    ``MIN_SAMPLES`` a side, with ``RUNNER_CONFIDENCE`` CIs (see the constant's comment).

    ``block_size`` is the most requests per block; it shrinks so that a block takes about
    ``target_block_s`` at the warm-up's pace, because a slow model on a busy machine would
    otherwise fit too few trials in the budget for a drift-aware CI. With fewer trials than
    that, the result is reported as inconclusive "no significant difference" whatever the
    independent-sample CI says. ``requests`` are raw batches sent one per call, cycled; both
    sides get the same request at the same position so content cannot bias the ratio.
    ``before_block(side)`` ("A" or "B") runs untimed before each block: a seam for switching a
    condition on or off (e.g. a background sampler) without billing the switch to a request.

    ``block_warmup`` calls (default: a quarter of the block) run untimed at the start of each
    block, on the block's own first requests. Right after a switch the other model has evicted
    this one's weights from the caches and parked its threads: on minilm (2-core EPYC) the
    first ONNX Runtime INT8 call after a torch block took 2.2-2.5x its steady time and the
    next few 1.3-1.9x, the torch side's first four 1.6-2.3x. A model served alone in its
    process never pays that, so it is not billed to the measured requests.

    ``self_timed``: each call returns the seconds it took, measured where it ran (an
    ArmProcess times ``predict`` in its own process); those are the samples, not the time the
    call took here."""
    if not requests:
        raise ValueError("no requests to compare on")
    rng = np.random.default_rng(seed)
    block_size = _warm_up(call_a, call_b, requests, warmup, clock,
                          block_size=block_size, target_block_s=target_block_s)
    trials = _Trials({"A": call_a, "B": call_b}, requests, block_size,
                     block_size // 4 if block_warmup is None else block_warmup, clock,
                     before_block, self_timed)
    start = clock()
    stopped = "budget"
    next_look = max(min_trials, MIN_BLOCK_TRIALS)
    while True:
        trials.run(["A", "B"] if rng.random() < 0.5 else ["B", "A"])
        elapsed = clock() - start
        if on_trial is not None:
            on_trial(trials.count, elapsed)
        if trials.count >= next_look and len(trials.samples["A"]) >= MIN_SAMPLES:
            next_look = 2 * trials.count
            if trials.stats(seed, threshold).conclusive:
                stopped = "conclusive"
                break
        if elapsed >= budget_s and trials.count >= 2:
            break
    stats = trials.stats(seed, threshold)
    if trials.count < MIN_BLOCK_TRIALS or len(trials.samples["A"]) < MIN_SAMPLES:
        stats = inconclusive(stats)
        stopped = (f"budget (only {trials.count} trials, {len(trials.samples['A'])} samples a "
                   f"side; a verdict needs {MIN_BLOCK_TRIALS} trials and {MIN_SAMPLES} samples)")
    return ComparisonResult(
        a=names[0], b=names[1], stats=stats,
        a_summary=LatencySummary.from_values(trials.samples["A"], rng_seed=seed),
        b_summary=LatencySummary.from_values(trials.samples["B"], rng_seed=seed),
        trials=trials.count, block_size=block_size, seconds=clock() - start,
        budget_s=budget_s, stopped=stopped, order=trials.order, block_warmup=trials.warm_calls)


def _warm_up(call_a: Call, call_b: Call, requests: Sequence[Sequence[Any]], warmup: int,
             clock: Callable[[], float], *, block_size: int, target_block_s: float) -> int:
    """Call each side ``warmup`` times, untimed; return the block size: ``block_size``, or
    fewer requests where a block would take longer than ``target_block_s`` at the warm-up's
    pace."""
    warm_start = clock()
    for i in range(warmup):
        call_a(requests[i % len(requests)])
        call_b(requests[i % len(requests)])
    if warmup:
        per_call = (clock() - warm_start) / (2 * warmup)
        if per_call > 0:
            block_size = max(1, min(block_size, int(target_block_s / per_call)))
    return block_size


@dataclass
class _Trials:
    """The trials of one comparison run so far: each side's samples in ms, and the block
    order actually run. Trial ``k``'s blocks send requests from position ``k * block_size``,
    the same ones to both sides."""

    calls: dict[str, Call]
    requests: Sequence[Sequence[Any]]
    block_size: int
    warm_calls: int  # untimed calls at the start of each block
    clock: Callable[[], float]
    before_block: Callable[[str], None] | None
    self_timed: bool
    samples: dict[str, list[float]] = field(default_factory=lambda: {"A": [], "B": []})
    order: list[str] = field(default_factory=list)
    count: int = 0

    def run(self, sides: list[str]) -> None:
        """One trial: a block of each side, in the order of ``sides``."""
        self.order.append("".join(sides))
        with steady_gc():  # full collections fall between trials, untimed
            for side in sides:
                self._block(side)
        self.count += 1

    def _block(self, side: str) -> None:
        if self.before_block is not None:
            self.before_block(side)
        first = self.count * self.block_size
        call = self.calls[side]
        for j in range(self.warm_calls):
            call(self.requests[(first + j) % len(self.requests)])
        for j in range(self.block_size):
            req = self.requests[(first + j) % len(self.requests)]
            t0 = self.clock()
            took = call(req)
            self.samples[side].append(
                (float(took) if self.self_timed else self.clock() - t0) * 1000.0)

    def stats(self, seed: int, threshold: float) -> ComparisonStats:
        return compare_samples(self.samples["A"], self.samples["B"], seed=seed,
                               threshold=threshold, block_size=self.block_size,
                               confidence=RUNNER_CONFIDENCE)


def inconclusive(stats: ComparisonStats) -> ComparisonStats:
    """The same figures with both verdicts withdrawn: too few trials to trust the CI."""
    def withdraw(est: RatioEstimate) -> RatioEstimate:
        return dataclasses.replace(est, verdict="no significant difference", conclusive=False)

    return dataclasses.replace(stats, p50=withdraw(stats.p50), p95=withdraw(stats.p95),
                               method=stats.method + " (too few trials: verdict withheld)")
