"""The short diagnosis ``infertune profile`` prints: which stage dominates the p50 and the p99,
where the tail comes from (the model, the preprocessing, or the machine), cold start,
utilisation and the top hotspots. Every sentence quotes figures from the Profile it reads.

Tail attribution: the stage whose mean time grows most from the typical requests (p40-p60)
to the slow tail (>= p99) is where the tail comes from. The machine is called noisy when the
round-to-round p50s vary by more than ``NOISY_CV`` (coefficient of variation), when steal time
averages above ``NOISY_STEAL`` percent, or when other processes kept more than
``NOISY_OTHER_CORES`` cores busy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from infertune.measure.coldstart import ColdStart
from infertune.measure.hotspots import Hotspots
from infertune.measure.padding import PaddingWaste
from infertune.measure.stage_timers import STAGES, StageReport
from infertune.measure.utilisation import Utilisation
from infertune.serial import Serial

NOISY_CV = 0.10
NOISY_STEAL = 1.0
NOISY_OTHER_CORES = 0.5
SIGNIFICANT_SHARE = 15.0  # percent of the typical request: worth its own line in a diagnosis
Likelihood = Literal["dominant", "significant", "minor"]
STAGE_WORDS = {"preprocess": "preprocessing", "forward": "the model (forward)",
               "postprocess": "postprocessing", "overhead": "Python glue between stages"}


@dataclass
class RoundStat(Serial):
    """One round of timed single requests (rounds are compared for run-to-run variance)."""

    index: int
    count: int
    p50_ms: float
    p99_ms: float


def stage_likelihood(stages: StageReport, stage: str) -> Likelihood:
    """How much ``stage`` matters to the typical (p50) request, by one rule for every report:
    the stage with the largest share dominates (as ``profile`` says), one with at least
    ``SIGNIFICANT_SHARE`` percent is significant, the rest are minor."""
    if stage == stages.dominant_p50:
        return "dominant"
    return "significant" if stages.share_p50.get(stage, 0.0) >= SIGNIFICANT_SHARE else "minor"


def round_cv(rounds: list[RoundStat]) -> float:
    """Coefficient of variation of the rounds' p50s (0 with a single round)."""
    p50s = np.asarray([r.p50_ms for r in rounds])
    return float(p50s.std() / p50s.mean()) if len(p50s) > 1 and p50s.mean() > 0 else 0.0


def tail_stage(stages: StageReport) -> tuple[str, float, float]:
    """(stage with the largest growth typical -> tail, its growth ms, total growth ms)."""
    growth = {s: stages.stage_ms(s, tail=True) - stages.stage_ms(s, tail=False) for s in STAGES}
    top = max(growth, key=lambda s: growth[s])
    return top, growth[top], stages.tail_e2e_ms - stages.typical_e2e_ms


def machine_signals(rounds: list[RoundStat], util: Utilisation) -> list[str]:
    found = []
    cv = round_cv(rounds)
    if cv > NOISY_CV:
        found.append(f"round-to-round p50 varies {100 * cv:.0f}% (CV over {len(rounds)} rounds)")
    if util.steal_mean > NOISY_STEAL:
        found.append(f"CPU steal averaged {util.steal_mean:.1f}%")
    if util.other_cores > NOISY_OTHER_CORES:
        found.append(f"other processes kept {util.other_cores:.1f} of {util.logical_cores} "
                     "cores busy")
    return found


def diagnose(stages: StageReport, rounds: list[RoundStat], util: Utilisation,
             cold: ColdStart | None, hotspots: Hotspots | None,
             padding: PaddingWaste | None) -> list[str]:
    lines = [_dominance(stages), _tail(stages, rounds, util)]
    if cold is not None:
        settled = (f"latency settles after {cold.settled_after} requests"
                   if cold.settled_after is not None
                   else f"latency had not settled after {len(cold.curve_ms)} requests")
        lines.append(f"Cold start {cold.total_s:.1f} s: import {cold.import_s:.1f} s, load "
                     f"{cold.load_s:.1f} s, first inference {cold.first_inference_ms:.0f} ms; "
                     f"{settled}.")
    lines.append(f"Utilisation: this process {util.process_cpu_mean:.0f}% of one core on "
                 f"average (peak {util.process_cpu_max:.0f}%), machine {util.system_cpu_mean:.0f}%"
                 f" of {util.logical_cores} cores, steal {util.steal_mean:.1f}%, peak RSS "
                 f"{util.peak_rss_mb:.0f} MiB" + _gpu(util) + ".")
    if hotspots is not None and hotspots.ops:
        top = ", ".join(f"{o.op} {o.share_percent:.0f}%" for o in hotspots.ops[:3])
        lines.append(f"Top operators ({hotspots.tool}): {top}.")
    if padding is not None:
        lines.append(f"Padding waste {100 * padding.waste_fraction:.0f}% at batch "
                     f"{padding.batch_size} ({padding.real_tokens:,} real of "
                     f"{padding.padded_tokens:,} computed tokens).")
    return lines


def _dominance(stages: StageReport) -> str:
    d50, d99 = stages.dominant_p50, stages.dominant_p99
    e2e = stages.summaries["e2e"]
    text = (f"{d50} dominates p50 ({stages.share_p50[d50]:.0f}% of a typical "
            f"{e2e.p50:.2f} ms request)")
    if d99 == d50:
        return text + f" and p99 ({stages.share_p99[d99]:.0f}% of {e2e.p99:.2f} ms)."
    return text + f"; {d99} dominates p99 ({stages.share_p99[d99]:.0f}% of {e2e.p99:.2f} ms)."


def _tail(stages: StageReport, rounds: list[RoundStat], util: Utilisation) -> str:
    e2e = stages.summaries["e2e"]
    ratio = e2e.p99 / e2e.p50 if e2e.p50 > 0 else float("inf")
    stage, grew, total = tail_stage(stages)
    text = (f"Tail: p99 is {ratio:.1f}x p50 ({e2e.tail_note}); the {stages.tail_requests} "
            f"requests at or above p99 average {stages.tail_e2e_ms:.2f} ms, {total:.2f} ms more "
            f"than typical, mostly in {STAGE_WORDS[stage]} (+{grew:.2f} ms)")
    noisy = machine_signals(rounds, util)
    if noisy:
        return text + "; the machine adds variance: " + "; ".join(noisy) + "."
    return text + "; the machine looked quiet (stable rounds, no steal)."


def _gpu(util: Utilisation) -> str:
    if util.gpu_util_mean is None:
        return ""
    return (f", GPU {util.gpu_util_mean:.0f}% busy, GPU memory peak "
            f"{util.gpu_memory_peak_mb or 0:.0f} MiB")
