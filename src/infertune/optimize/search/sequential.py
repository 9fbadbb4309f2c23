"""Sequential stopping for screening: stop timing a variant, and skip its quality run, as soon
as its speed-up CI rules out beating the reference (the fastest variant so far that passed the
floor, else the baseline) by the minimum effect, so a clear loser costs a few seconds.

The check runs at a few fixed sample counts (``looks``), each at ``confidence``: with four
looks at 99%, the chance of stopping a variant that does beat the reference is at most about
4% (Bonferroni over the looks), and a close call is never stopped, it only runs to its
budget. Both the p50 and the p95 ratio must rule it out, so a variant with a worse median but
a better tail (a thread plan without spinning, say) is kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from infertune.measure.compare import compare_samples
from infertune.optimize.search.timing import time_alone


@dataclass(frozen=True)
class StopRule:
    min_effect: float = 0.05  # the reference must be beaten by 5% to be worth more time
    looks: tuple[int, ...] = (20, 40, 80, 160)
    confidence: float = 0.99
    n_boot: int = 400  # per look: enough for a 99% bound on a clear loser, cheap to compute

    def __post_init__(self) -> None:
        if self.min_effect < 0 or not 0.5 < self.confidence < 1 or min(self.looks) < 5:
            raise ValueError("StopRule: min_effect >= 0, confidence in (0.5, 1), looks >= 5")


def clear_loser(reference_ms: Sequence[float], variant_ms: Sequence[float], rule: StopRule,
                *, reference: str = "the baseline", seed: int = 0) -> str | None:
    """Why the variant cannot beat the reference by ``rule.min_effect``, or None while it
    still might. Both sides are timed on the same requests in the same order, so the first
    ``n`` of each are compared."""
    n = min(len(reference_ms), len(variant_ms))
    if n < min(rule.looks):
        return None
    st = compare_samples(reference_ms[:n], variant_ms[:n], seed=seed, n_boot=rule.n_boot,
                         confidence=rule.confidence)
    beat = 1.0 / (1.0 + rule.min_effect)  # variant/reference ratio that beats by min_effect
    if st.p50.low > beat and st.p95.low > beat:
        return (f"stopped after {n} samples: its p50 and p95 are {st.p50.ratio:.2f}x and "
                f"{st.p95.ratio:.2f}x {reference}'s ({rule.confidence:.0%} CI lower bounds "
                f"{st.p50.low:.2f}, {st.p95.low:.2f}), so it cannot beat {reference} by "
                f"{rule.min_effect:.0%}")
    return None


def time_sequential(call: Callable[[Sequence[Any]], Any], requests: Sequence[Sequence[Any]], *,
                    reference_ms: Sequence[float], budget_s: float, rule: StopRule,
                    reference: str = "the baseline", min_n: int = 20, max_n: int = 300,
                    warmup: int = 3, seed: int = 0,
                    clock: Callable[[], float] = time.perf_counter,
                    ) -> tuple[list[float], str | None]:
    """Per-request latencies (ms) of ``call`` on ``requests`` in order, like timing.time_alone,
    stopping early (with the reason) once ``clear_loser`` says so at one of the looks."""
    looks = sorted(rule.looks)
    reason: list[str] = []

    def stop(out: list[float]) -> bool:
        if not looks or len(out) < looks[0]:
            return False
        looks.pop(0)
        found = clear_loser(reference_ms, out, rule, reference=reference, seed=seed)
        reason.extend([found] if found is not None else [])
        return found is not None

    samples = time_alone(call, requests, budget_s=budget_s, min_n=min_n, max_n=max_n,
                         warmup=warmup, clock=clock, until=stop)
    return samples, reason[0] if reason else None
