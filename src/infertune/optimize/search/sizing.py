"""Sizing to the model: ``--budget auto`` (a complete search's estimated need, from the
parameters and the measured call and export times, costs.py) and the baseline profile's
minimum counts fitted to the measured call time. The stages (stages/setup.py, profile.py,
build.py) and run.py call these."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from infertune.measure.profile import ProfileSettings
from infertune.optimize.findings import BuiltVariant
from infertune.optimize.search.budget import Budget, Progress
from infertune.optimize.search.builder import plan_passes
from infertune.optimize.search.costs import CostFacts, auto_budget, params_millions
from infertune.optimize.search.timing import Skipped, time_alone
from infertune.optimize.state import RunState
from infertune.quality import run_outputs

# Shares of the budget the baseline's quality outputs and profile are fitted to. make demo
# (minilm, 330 s) spent 8.3 s on the reference outputs of 300 inputs and 19.5 s profiling.
QUALITY_SHARE = 0.08
PROFILE_SHARE = 0.12
CURVE_POINTS = 5  # lengths the profile's batch-1 service curve is timed at, about
MIN_QUALITY = 64  # fewer and the floor's bootstrap CI gets too wide to decide on


def probe_costs(state: RunState, quality: Sequence[Any]) -> tuple[float, float]:
    """(batch-1 call ms, ms per input at batch 16), probed before the run times the baseline
    properly: the fastest of 3 calls on the data's first inputs after 2 warm-up calls (eager
    torch's first calls run far slower: minilm's median of the first 3 read 266 ms where its
    later batch-1 median was 54 ms, on this shared machine), and one batch of 16 inputs spread
    over ``quality`` (sorted by length), what every quality run is made of."""
    probe = [[x] for x in state.options.data.inputs[:5]]
    call_ms = min(time_alone(state.baseline.predict, probe, budget_s=0.0, min_n=3, max_n=3,
                             warmup=2))
    batch = list(quality[::max(1, len(quality) // 16)])[:16]
    if not batch:
        return call_ms, call_ms
    started = time.perf_counter()
    run_outputs(state.baseline, batch, batch_size=16, source=state.options.data.source)
    return call_ms, (time.perf_counter() - started) * 1000.0 / len(batch)


def quality_count(wanted: int, item_ms: float, budget_s: float) -> int:
    """How many held-out inputs every quality run judges on: ``wanted``, or fewer (not under
    MIN_QUALITY) when that many would cost more than QUALITY_SHARE of the budget at the
    probed per-input time ``item_ms``."""
    fits = int(QUALITY_SHARE * budget_s * 1000.0 / max(item_ms, 1e-3))
    return max(min(wanted, MIN_QUALITY), min(wanted, fits))


def params_m(state: RunState) -> float | None:
    """Million parameters from the model's weight files, else as the scenario states them."""
    stated = state.options.scenario.model.parameters_millions
    found = params_millions(Path(state.baseline.info.source))
    return found if found is not None else stated


def size_budget(state: RunState, budget: Budget, progress: Progress) -> None:
    """--budget auto: time a few baseline calls and one quality batch, count the parameters,
    and size the budget for a complete search of this model here (costs.py); a no-op
    otherwise. The build stage sizes it again once the export's own time is measured."""
    if not state.options.budget_auto:
        return
    progress.tick("timing the baseline to size the budget")
    calls = time_alone(state.baseline.predict, state.requests, budget_s=2.0, min_n=5, max_n=20)
    batch = state.quality_inputs[:16]
    started = time.perf_counter()
    run_outputs(state.baseline, batch, batch_size=16, source=state.options.data.source)
    item_ms = (time.perf_counter() - started) * 1000.0 / max(len(batch), 1)
    facts = CostFacts(call_ms=float(np.median(calls)), item_ms=item_ms,
                      params_m=params_m(state), n_quality=len(state.quality_inputs))
    resize(state, budget, facts)


def resize(state: RunState, budget: Budget, facts: CostFacts, *,
           later_share: float | None = None) -> None:
    """Set an auto budget to what a complete search needs from ``facts``. Once the variants
    are built, ``later_share`` (the share of any budget the stages after building get) keeps
    it from leaving them less, whatever the build took."""
    tensor = state.baseline.info.kind == "tensor"
    passes, _ = plan_passes(state.options.quick, budget.total_s, tensor,
                            hw=state.profiling.hardware)
    choice = auto_budget(passes, facts)
    floor = budget.spent() + later_share * choice.seconds if later_share else 0.0
    if choice.seconds < floor:
        choice = dataclasses.replace(
            choice, seconds=round(floor, 1), reason=choice.reason + f"; raised to {floor:.0f} s "
            f"because building took {budget.spent():.0f} s of it already")
    budget.total_s = choice.seconds
    state.log.budget_choice = choice
    state.log.notes.append(choice.reason)


def fit_profile(state: RunState, settings: ProfileSettings,
                share_s: float) -> ProfileSettings:
    """The profile's minimum counts, scaled to the model's call time so the profile stays near
    ``share_s``: its time caps hold only once each round has its minimum of requests, and on
    a BERT-base-sized encoder on this shared 2-core machine (load average near 10) the timed
    rounds' 3 x 25 minimum alone kept the profile running for over 4 minutes of 5.5."""
    call_s = (state.log.cost_facts.call_ms if state.log.cost_facts is not None
              else probe_costs(state, [])[0]) / 1000.0
    rounds_s = 0.4 * share_s  # the timed rounds' part of the share; the curve gets 0.3
    per_round = int(rounds_s / max(settings.rounds * call_s, 1e-6))
    fitted = dataclasses.replace(
        settings, min_round_requests=max(5, min(settings.min_round_requests, per_round)),
        warmup=max(1, min(settings.warmup, int(0.1 * share_s / max(call_s, 1e-6)))),
        batch_sizes=tuple(b for b in settings.batch_sizes
                          if b == 1 or b * call_s * settings.curve_repeats <= 0.3 * share_s),
        # the curve's points (several lengths per batch size) each repeat at least once
        curve_repeats=max(1, min(settings.curve_repeats,
                                 int(0.3 * share_s / max(CURVE_POINTS * call_s, 1e-6)))),
        hotspot_calls=1 if call_s * settings.typical_batch > 0.1 * share_s
        else settings.hotspot_calls,
        cold_start=settings.cold_start
        and settings.cold_start_requests * call_s <= 0.2 * share_s)
    if fitted != settings:
        state.log.notes.append(
            f"profile fitted to a batch-1 call of {call_s * 1000:.0f} ms (the fastest of 3 "
            f"calls): {fitted.min_round_requests} requests per round at least, batch sizes "
            f"{', '.join(map(str, fitted.batch_sizes))}, {fitted.curve_repeats} repeat(s) a "
            f"curve point, {fitted.hotspot_calls} operator-profile call(s)"
            + ("" if fitted.cold_start or not settings.cold_start else ", no cold start")
            + f", to stay near {share_s:.0f} s of the budget")
    return fitted


def int8_budget_note(built: Sequence[BuiltVariant], skipped: Sequence[Skipped], spent_s: float,
                     build_share: float) -> str | None:
    """When no INT8 variant was ``built`` because none fitted the build share (the run's
    ``skipped`` say so): the budget that would have let the cheapest one be built and screened
    (estimate), else None."""
    int8 = [b for b in built if "int8" in b.variant_id and not b.skipped]
    left = [s for s in skipped if s.what.startswith("variant ort_int8") and s.need_s
            and "not built" in s.reason]
    if int8 or not left:
        return None
    cheapest = min(left, key=lambda s: s.need_s or 0.0)
    need = cheapest.need_s or 0.0
    total = (spent_s + need) / build_share
    name = cheapest.what.removeprefix("variant ")
    return (f"INT8 on this model: no INT8 variant fitted this budget; {name} would be built "
            f"and screened with a budget of about {total:.0f} s (estimate: the {spent_s:.0f} "
            f"s spent until building stopped, measured, plus its {need:.0f} s estimated "
            f"need, within the {build_share:.0%} of a budget building may use); pass --budget "
            f"{-(-total // 60):.0f}m")
