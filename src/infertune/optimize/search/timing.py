"""The search: measure every variant quickly, gate it on quality, drop the dominated ones, and
measure the survivors properly (interleaved against the baseline), all inside a time budget
(budget.py).

Latency here is end to end through the Adapter (tokenise -> forward -> postprocess) at batch 1
on the user's held-out inputs, one request per call, so the figures are what a caller sees.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infertune.measure.collector import steady_gc
from infertune.measure.compare import compare_samples
from infertune.measure.summary import LatencySummary
from infertune.optimize.search.screening import ServedScreen
from infertune.serial import Serial


@dataclass
class Skipped(Serial):
    """Something the run did not do, and why (budget, not applicable, failed)."""

    what: str
    reason: str
    need_s: float | None = None


# Where the two sides of an interleaved comparison ran (Timing.where): in their own processes
# as served, or both in the optimizer's process (--quick, or a model that cannot be loaded
# again in another process), where each disturbs the other's threads and caches.
OWN_PROCESSES = "each side in its own process"
ONE_PROCESS = "both in one process"


@dataclass
class Timing(Serial):
    """Latency of one variant against the baseline from one interleaved comparison."""

    variant_id: str
    kind: str  # "quick" | "proper"
    samples: int  # per side
    p50_ms: float
    p95_ms: float
    p99_ms: float
    base_p50_ms: float
    base_p95_ms: float
    base_p99_ms: float
    ratio_p50: float  # variant / baseline
    ratio_p50_ci: tuple[float, float]
    ratio_p95: float
    ratio_p95_ci: tuple[float, float]
    verdict: str
    seconds: float
    latencies_ms: list[float] = field(default_factory=list, repr=False)  # for the CDF plot
    where: str = ONE_PROCESS  # OWN_PROCESSES or ONE_PROCESS

    @property
    def speedup_p95(self) -> float:
        return 1.0 / self.ratio_p95 if self.ratio_p95 > 0 else float("inf")

    @property
    def measurably_faster(self) -> bool:
        """Faster than the baseline beyond noise (the p50 verdict, or a p95 ratio CI wholly
        below 1) without a p95 measurably worse: only such a variant is worth recommending."""
        low95, high95 = self.ratio_p95_ci
        return (self.verdict == "B is faster" or high95 < 1.0) and low95 <= 1.0


Compare = Callable[..., Any]  # measure.compare.run_interleaved


def timing_from(variant_id: str, kind: str, result: Any) -> Timing:
    """A Timing from a measure.compare.ComparisonResult (A = baseline, B = variant)."""
    a, b, st = result.a_summary, result.b_summary, result.stats
    return Timing(
        variant_id=variant_id, kind=kind, samples=min(st.n_a, st.n_b),
        p50_ms=b.p50, p95_ms=b.p95, p99_ms=b.p99,
        base_p50_ms=a.p50, base_p95_ms=a.p95, base_p99_ms=a.p99,
        ratio_p50=st.p50.ratio, ratio_p50_ci=(st.p50.low, st.p50.high),
        ratio_p95=st.p95.ratio, ratio_p95_ci=(st.p95.low, st.p95.high),
        verdict=st.p95.verdict, seconds=result.seconds)


def measure_against_baseline(compare: Compare, baseline_call: Callable[[Sequence[Any]], Any],
                             variant_call: Callable[[Sequence[Any]], Any], variant_id: str,
                             requests: Sequence[Sequence[Any]], *, kind: str, budget_s: float,
                             seed: int = 0, keep_samples: bool = False,
                             own_processes: bool = False) -> Timing:
    """Interleaved trials of baseline (A) and variant (B) on the same requests.
    ``own_processes``: the calls are ArmProcesses, which return the time each request took in
    its own process."""
    quick = kind == "quick"
    extra = {"self_timed": True} if own_processes else {}
    # blocks of up to 20 requests (the runner shrinks them so one block takes about
    # target_block_s): enough samples per side for a p95 even when the baseline is slow
    result = compare(baseline_call, variant_call, requests, budget_s=budget_s,
                     block_size=10 if quick else 20, min_trials=8 if quick else 20,
                     warmup=3 if quick else 5, seed=seed, target_block_s=2.0,
                     names=("baseline", variant_id), **extra)
    timing = timing_from(variant_id, kind, result)
    timing.where = OWN_PROCESSES if own_processes else ONE_PROCESS
    return timing


def time_alone(call: Callable[[Sequence[Any]], Any], requests: Sequence[Sequence[Any]], *,
               budget_s: float, min_n: int = 20, max_n: int = 300, warmup: int = 3,
               clock: Callable[[], float] = time.perf_counter,
               until: Callable[[list[float]], bool] | None = None) -> list[float]:
    """Per-request latencies (ms) of ``call`` on ``requests`` in order, until ``budget_s`` is
    spent once ``min_n`` are in, or ``max_n`` (or every request) is used, or ``until`` (asked
    after every sample) says stop."""
    for req in requests[:warmup]:
        call(req)
    out: list[float] = []
    start = clock()
    with steady_gc():
        for req in requests:
            t0 = clock()
            call(req)
            out.append((clock() - t0) * 1000.0)
            if until is not None and until(out):
                break
            if len(out) >= max_n or (len(out) >= min_n and clock() - start >= budget_s):
                break
    return out


def quick_timing(variant_id: str, base_ms: Sequence[float], variant_ms: Sequence[float],
                 seed: int = 0) -> Timing:
    """A screening Timing from separate (not interleaved) runs on the same requests; the
    proper figure comes from ``measure_against_baseline`` for the survivors."""

    n = min(len(base_ms), len(variant_ms))
    a, b = list(base_ms[:n]), list(variant_ms[:n])
    st = compare_samples(a, b, seed=seed)
    sa = LatencySummary.from_values(a, rng_seed=seed, n_boot=100)
    sb = LatencySummary.from_values(b, rng_seed=seed, n_boot=100)
    return Timing(variant_id=variant_id, kind="quick", samples=n, p50_ms=sb.p50,
                  p95_ms=sb.p95, p99_ms=sb.p99, base_p50_ms=sa.p50, base_p95_ms=sa.p95,
                  base_p99_ms=sa.p99, ratio_p50=st.p50.ratio,
                  ratio_p50_ci=(st.p50.low, st.p50.high), ratio_p95=st.p95.ratio,
                  ratio_p95_ci=(st.p95.low, st.p95.high), verdict=st.p95.verdict,
                  seconds=0.0)


@dataclass
class Candidate(Serial):
    """A variant as the search sees it: its quick and proper timings and its quality."""

    variant_id: str
    title: str
    quality_verdict: str  # pass | fail | inconclusive | unknown
    quality_value: float | None
    quality_ci: tuple[float, float] | None = None
    quick: Timing | None = None
    proper: Timing | None = None
    dropped: str = ""  # why it left the search (floor, dominated), empty when kept
    is_baseline: bool = False
    served: ServedScreen | None = None  # screening at the batch sizes serving forms

    def item_ms(self, batch: int) -> float | None:
        """Its screened time per input at ``batch`` (None where that size was not timed)."""
        ms = self.served.curve.ms(batch) if self.served is not None else None
        return ms / batch if ms is not None else None

    @property
    def best_timing(self) -> Timing | None:
        return self.proper or self.quick


def select_survivors(candidates: Sequence[Candidate], *, keep: int = 3,
                     tie: float = 0.05) -> list[Candidate]:
    """Mark candidates that fail the floor or are dominated; return the survivors: the
    ``keep`` fastest at batch 1 (p95), then the fastest per input at each larger batch size
    screening timed, if not among them. B dominates A when B passes, is faster at p95 by more
    than ``tie``, its quality is no lower and A is not faster at a batch size serving forms.
    Inconclusive quality survives only when nothing passes (it is reported as such)."""
    # a variant screening already dropped (stopped early as a clear loser) keeps its reason
    timed = [c for c in candidates
             if c.quick is not None and not c.is_baseline and not c.dropped]
    passing = [c for c in timed if c.quality_verdict == "pass"]
    for c in timed:
        if c.quality_verdict == "fail":
            c.dropped = "fails the quality floor"
        elif c.quality_verdict != "pass" and passing:
            c.dropped = f"quality {c.quality_verdict}; passing variants exist"
    alive = [c for c in timed if not c.dropped]
    for c in alive:
        for other in alive:
            if other is c or other.dropped:
                continue
            if _dominates(other, c, tie):
                c.dropped = f"dominated by {other.variant_id} (faster, quality no lower)"
                break
    alive = sorted((c for c in alive if not c.dropped),
                   key=lambda c: c.quick.p95_ms if c.quick else float("inf"))
    chosen = alive[:keep] + [c for c in batch_winners(alive) if c not in alive[:keep]]
    for c in alive:
        if c not in chosen:
            c.dropped = (f"not among the {keep} fastest survivors at batch 1, nor the fastest "
                         "at a batch size serving forms")
    return chosen


def batch_winners(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The fastest per input at each batch size above 1 that screening timed (a variant slow
    alone can be the one that serves full batches best), in batch order, each once."""
    sizes = sorted({b for c in candidates if c.served is not None for b in c.served.batches
                    if b > 1})
    out: list[Candidate] = []
    for size in sizes:
        timed = [(ms, i) for i, c in enumerate(candidates)
                 if (ms := c.item_ms(size)) is not None]
        if timed:
            winner = candidates[min(timed)[1]]
            out.extend([winner] if winner not in out else [])
    return out


def fastest_at_largest_batch(candidates: Sequence[Candidate]) -> Candidate | None:
    """The candidate fastest per input at the largest batch size any was screened at."""
    sizes = [b for c in candidates if c.served is not None for b in c.served.batches]
    if not sizes or max(sizes) <= 1:
        return None
    timed = [(ms, i) for i, c in enumerate(candidates)
             if (ms := c.item_ms(max(sizes))) is not None]
    return candidates[min(timed)[1]] if timed else None


def _dominates(b: Candidate, a: Candidate, tie: float) -> bool:
    """B passes, is faster at batch 1 p95 by more than ``tie``, its quality is no lower, and
    ``a`` is not faster by more than ``tie`` at any larger batch size both were timed at."""
    if b.quick is None or a.quick is None or b.quality_verdict != "pass":
        return False
    faster = b.quick.p95_ms < a.quick.p95_ms * (1 - tie)
    qa, qb = a.quality_value, b.quality_value
    no_worse = qa is None or (qb is not None and qb >= qa)
    sizes = set(a.served.batches if a.served else ()) & set(b.served.batches if b.served else ())
    for size in sorted(sizes - {1}):
        a_ms, b_ms = a.item_ms(size), b.item_ms(size)
        if a_ms is not None and b_ms is not None and a_ms < b_ms * (1 - tie):
            return False  # a wins where serving batches: not dominated
    return faster and no_worse


def pick_best(candidates: Sequence[Candidate]) -> Candidate | None:
    """The fastest variant (proper p95 when measured, else quick) that passes the floor and is
    measurably faster than the baseline."""
    ok = [c for c in candidates if c.quality_verdict == "pass" and c.best_timing is not None
          and c.best_timing.measurably_faster and not c.is_baseline and not c.dropped]
    if not ok:
        return None
    return min(ok, key=lambda c: c.best_timing.p95_ms)  # type: ignore[union-attr]


def batch1_requests(inputs: Sequence[Any], n: int, seed: int = 0) -> list[list[Any]]:
    """``n`` single-input requests drawn (seeded) from the held-out inputs, so the mix of
    lengths is the data's own."""
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(inputs))
    reps = -(-n // max(len(idx), 1))
    order = np.tile(idx, reps)[:n]
    return [[inputs[i]] for i in order]
