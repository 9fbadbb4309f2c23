"""How long the confirmation as served runs: the load test that would decide an SLO verdict,
the ABBA segments' lengths, and the winner's extension, paid from the budget where a projection
says it would decide a verdict the ABBA segments left "not shown".

The decisive run (``decisive_run``): enough answers that the SLO's tail percentile stands on
TAIL_SAMPLES answers above it (a p99: 3,000 requests), over at least tail_interval.MIN_BLOCKS of
the traffic's burst blocks (traffic.burst_block_s).

The ABBA segments (``segment_seconds``) split the decisive run over an arm's visits, all shrunk
by one factor when the budget cannot pay for every finalist to get it.

The extension (``project``, ``plan_extensions``; confirm.extend_winner drives it): after
ABBA the winner's verdict at a rate is
meets / misses / not shown (``point_verdict``, the rule report/run_slo.py prints). Where it is not
shown, the interval's half-width on the side that faces the target shrinks as 1/sqrt(n), so the
answers that would decide it with 80% power are about

    n_needed = n * (half_width * (1 + Z_POWER / z_look) / |estimate - target|)^2

(and never fewer than the decisive run's count, which the tail rule and the burst blocks need).
An estimate on the target never decides: it is not paid. Affordable projections are paid
cheapest first while the budget left holds them (each decision is worth the same to the user,
and each is projected at the same 80% power, so the cheapest has the highest expected value per
second); the rest are recorded with what they would cost.

The confirmation looks at the data at most twice (after ABBA, after the extension), so every
look's interval is at LOOK_CONFIDENCE (97.5%, Bonferroni): a wrong "meets" or "misses" over
both looks stays at most the single look's 5%.

    decisive_run(label, targets, traffic, rate) -> DecisiveRun
    segment_seconds(runs, arms=, visits=, left_s=, start_s=, minimum_s=) -> {label: seconds}
    point_verdict(val, targets) -> "meets" | "misses" | "not shown"
    project(label, val, targets, decisive) -> Extension    plan_extensions(...) -> [Extension]
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scipy import stats

from infertune.config import TrafficFacts
from infertune.measure.tail_interval import MIN_BLOCKS, TailInterval, Verdict, verdict
from infertune.optimize.served.policy_sweep import SHED_LIMIT
from infertune.optimize.served.traffic import Validation, burst_block_s, schedule_for
from infertune.serial import Serial

TAIL_SAMPLES = 30
LOOK_CONFIDENCE = 0.975  # each of the confirmation's two looks (module docstring)
Z_POWER = float(stats.norm.ppf(0.80))  # the extension is sized to decide with 80% power
# a projection past this many times the answers so far is no plan: the estimate sits so near
# the target that no affordable run decides it (and the 1/sqrt(n) model is far from its data)
MAX_GROWTH = 50.0
DRAIN_S = 1.0  # a segment's in-flight requests finishing after its schedule ends


@dataclass(frozen=True)
class DecisiveRun(Serial):
    """The load test that would decide the SLO verdict at one rate (pooled over an arm's
    segments): ``requests`` over ``duration_s`` at ``rate`` requests/s."""

    label: str
    rate: float
    requests: int
    duration_s: float
    block_s: float
    percentile: str  # the SLO's tail percentile the size comes from, e.g. "p99"

    def text(self) -> str:
        return (f"{self.requests:,} requests over {self.duration_s:.0f} s at {self.rate:g} "
                f"requests/s ({TAIL_SAMPLES} answers above the {self.percentile}, "
                f"{MIN_BLOCKS} blocks of {self.block_s:g} s for the traffic's bursts)")


def decisive_run(label: str, targets: dict[str, float], traffic: TrafficFacts,
                 rate: float) -> DecisiveRun:
    """The run that decides a verdict on ``targets`` ({"p99": ms}) at ``rate`` with the
    scenario's traffic shape; ValueError on a rate <= 0."""
    if not rate > 0:
        raise ValueError(f"decisive_run: rate must be > 0, got {rate}")
    key = max(targets, key=lambda k: float(k[1:]), default="p99")
    q = float(key[1:]) / 100.0
    requests = math.ceil(TAIL_SAMPLES / (1.0 - q) - 1e-9)
    block = burst_block_s(schedule_for(traffic, rate, duration_s=1.0).spec)
    duration = max(requests / rate, MIN_BLOCKS * block)
    return DecisiveRun(label, rate, math.ceil(duration * rate), round(duration, 1), block, key)


def segment_seconds(runs: Sequence[DecisiveRun], *, arms: int, visits: int, left_s: float,
                    start_s: float, minimum_s: float, extend: bool = False) -> dict[str, float]:
    """One ABBA segment's length per rate label: the decisive run split over an arm's
    ``visits`` when ``left_s`` (the budget left for the confirmation: ``arms`` x ``visits``
    segments per rate, a drain each, plus ``start_s``) pays for every arm to get it; else all
    scaled down by one factor, never under ``minimum_s``.

    The factor: without ``extend``, what makes the segments fit ``left_s``. With ``extend``
    (the winner alone is then topped up to the decisive run, see the module docstring) the
    budget first holds one decisive run per rate and the ABBA segments share what is left:
    a rate then costs D + (arms - 1) x visits x s instead of arms x visits x s, so the ABBA
    segments are shorter and the winner's verdict can still be decided."""
    want = {r.label: max(minimum_s, r.duration_s / visits) for r in runs}
    segments = arms * visits
    pay = left_s - start_s - segments * len(want) * DRAIN_S
    total = segments * sum(want.values())
    if total <= pay or total <= 0:
        return want
    if extend and arms > 1:
        decisive = sum(r.duration_s for r in runs) + len(want) * DRAIN_S
        scale = max(0.0, pay - decisive) / ((arms - 1) * visits * sum(want.values()))
    else:
        scale = max(0.0, pay) / total
    return {label: round(max(minimum_s, s * scale), 1) for label, s in want.items()}


def point_verdict(val: Validation, targets: Mapping[str, float]) -> Verdict:
    """"misses" when more than SHED_LIMIT went unanswered or a percentile's interval lies above
    its target; "meets" when every target's interval lies below; else "not shown" (also for a
    target without an interval)."""
    found = [verdict(val.intervals[k], t)[0] if k in val.intervals else "not shown"
             for k, t in targets.items()]
    if val.stats.shed > SHED_LIMIT or "misses" in found:
        return "misses"
    return "meets" if found and all(f == "meets" for f in found) else "not shown"


@dataclass
class Extension(Serial):
    """The winner's extension at one rate: what ABBA left, what would decide it, whether it was
    paid, and what the pooled figures said after."""

    label: str
    rate: float
    verdict_before: str  # "meets" | "misses" | "not shown" after the ABBA segments
    requests_before: int
    # answers in all that would decide it (projected, 80% power); None: no projection decides
    # it (an estimate on the target, or a trace replayed)
    requests_needed: int | None
    seconds: float  # the extension's length at the rate (0 when none is projected)
    paid: bool
    why: str  # why it was paid or not, in words for the report
    verdict_after: str | None = None  # after pooling the extension (paid ones only)
    requests_after: int | None = None

    def text(self) -> str:
        """One line for the report's notes."""
        head = f"at the {self.label} rate the ABBA segments left the verdict {self.verdict_before}"
        if self.verdict_before != "not shown":
            return head
        if not self.paid:
            return f"{head}; not extended: {self.why}"
        return (f"{head}; extended by {self.seconds:g} s ({self.why}): {self.requests_after:,} "
                f"answers pooled, verdict {self.verdict_after}")


def _needed(interval: TailInterval, target: float) -> float | None:
    """Answers that would move ``interval`` off ``target`` with 80% power (module docstring);
    None when the estimate sits on the target or the facing side has no bound."""
    z_look = float(stats.norm.ppf(0.5 + interval.confidence / 2))
    below = interval.value <= target
    gap = (target - interval.value) if below else (interval.value - target)
    bound = interval.high if below else interval.low
    if gap <= 0 or bound is None:
        return None
    half = abs(bound - interval.value)
    return interval.samples * (half * (1.0 + Z_POWER / z_look) / gap) ** 2


def project(label: str, val: Validation, targets: Mapping[str, float],
            decisive: DecisiveRun) -> Extension:
    """What would decide the verdict at ``label``: none needed when ABBA decided it; else the
    largest projection over the undecided targets, at least the decisive run's count."""
    before = point_verdict(val, targets)
    n = val.stats.requests
    if before != "not shown":
        return Extension(label, decisive.rate, before, n, None, 0.0, False, "decided by ABBA")
    wants: list[float] = []
    for key, target in targets.items():
        interval = val.intervals.get(key)
        if interval is None:
            continue
        if verdict(interval, target)[0] == "meets":
            continue
        need = _needed(interval, target) if interval.high is not None else None
        if need is None and interval.high is not None:
            return Extension(label, decisive.rate, before, n, None, 0.0, False,
                             f"the {key} estimate ({interval.value:.1f} ms) sits on the "
                             f"{target:g} ms target: no run of any length is projected to "
                             "decide it")
        wants.append(need if need is not None else 0.0)
    if not wants:
        return Extension(label, decisive.rate, before, n, None, 0.0, False,
                         "no percentile interval was recorded")
    needed = max(decisive.requests, math.ceil(max(wants)))
    if needed > MAX_GROWTH * max(n, 1):
        return Extension(label, decisive.rate, before, n, needed, 0.0, False,
                         f"deciding it is projected to take {needed:,} answers, over "
                         f"{MAX_GROWTH:g} times the {n:,} so far")
    seconds = round(max(0.0, needed - n) / decisive.rate, 1)
    return Extension(label, decisive.rate, before, n, needed, seconds, False,
                     f"projected: {needed:,} answers in all decide it with 80% power")


def plan_extensions(projections: Sequence[Extension], left_s: float) -> list[Extension]:
    """Mark the affordable projections paid, cheapest first, while ``left_s`` (the budget the
    confirmation may still spend) holds each one and its drain; the others say what they would
    need. Order: as given."""
    paid: set[str] = set()
    left = left_s
    for ext in sorted((e for e in projections if e.requests_needed is not None
                       and e.seconds > 0), key=lambda e: e.seconds):
        if ext.seconds + DRAIN_S <= left:
            paid.add(ext.label)
            left -= ext.seconds + DRAIN_S
    out = []
    for ext in projections:
        if ext.label in paid:
            out.append(dataclasses.replace(ext, paid=True))
        elif ext.requests_needed is not None and ext.seconds > 0 and not ext.paid:
            out.append(dataclasses.replace(
                ext, why=f"{ext.why}; {ext.seconds:g} s more at {ext.rate:g} requests/s did "
                f"not fit the {max(left, 0):.0f} s of budget left"))
        else:
            out.append(ext)
    return out

