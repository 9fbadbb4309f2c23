"""The measuring stages of ``optimize`` (run.py gives the order; the serving stages are in
policy.py). Each takes the RunState, the Budget and
the Progress display; each checks the budget first and, when it cannot do its work properly,
records what it skipped and what it would have needed instead of measuring badly."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from infertune import hardware
from infertune.config import Scenario
from infertune.data import HeldOut
from infertune.data.text_inputs import is_text_input, text_length
from infertune.jsonfile import write_json
from infertune.measure.arm_process import ArmFailed, ArmProcess
from infertune.measure.compare import run_interleaved
from infertune.measure.profile import ProfileSettings, profile
from infertune.models import load
from infertune.models.base import Adapter
from infertune.models.loaders import HF_TASKS
from infertune.models.tensor import TensorAdapter
from infertune.optimize.builder import Builder, default_builder
from infertune.optimize.choice import best_adapter
from infertune.optimize.costs import (
    CostFacts,
    screen_s,
)
from infertune.optimize.inputs import (
    InputOptions,
    cache_estimate,
    measure_bucketing,
    measure_trimming,
    trim_length_for,
)
from infertune.optimize.screening import (
    BatchPoint,
    ScreenCurve,
    ServedScreen,
    scenario_batches,
    time_batches,
    update_best,
)
from infertune.optimize.screening import judge as judge_batches
from infertune.optimize.search import (
    NEED_PROPER_S,
    NEED_QUICK_S,
    Budget,
    Candidate,
    Progress,
    Timing,
    batch1_requests,
    measure_against_baseline,
    quick_timing,
    select_survivors,
    time_alone,
)
from infertune.optimize.sequential import StopRule, time_sequential
from infertune.optimize.sizing import (
    PROFILE_SHARE,
    QUALITY_SHARE,
    fit_profile,
    int8_budget_note,
    params_m,
    probe_costs,
    quality_count,
    resize,
)
from infertune.optimize.state import (
    OptimizeOptions,
    RunPaths,
    RunState,
    quality_floor,
    quality_metrics,
)
from infertune.quality import QualityResult, evaluate_outputs, run_outputs
from infertune.quality.degenerate import check_outputs_vary
from infertune.quality.metrics import TASKS
from infertune.quality.validate import preflight

NEED_PROFILE_S = 15.0
NEED_REFERENCE_S = 5.0
NEED_BUILD_S = 20.0
NEED_SERVING_S = 20.0
NEED_INPUTS_S = 10.0
CALIBRATION = 128  # the held-out inputs INT8 passes calibrate and score on (builder.py)
# Marks (fractions of the whole budget) by which each stage must stop starting new work, so
# that a slow stage leaves time for the ones after it.
MARK_BUILD = 0.45
MARK_SCREEN = 0.68
MARK_CONFIRM = 0.80


def write_scenario(paths: RunPaths, scenario: Scenario, detected: dict[str, Any]) -> None:
    """The user's scenario as given, plus what we detected, in one YAML file."""
    text = yaml.safe_dump(scenario.to_dict(), sort_keys=False)
    text += "# detected on this machine by infertune optimize (not part of the scenario):\n"
    text += "\n".join("# " + line
                      for line in yaml.safe_dump({"detected": detected},
                                                 sort_keys=False).splitlines())
    paths.scenario.write_text(text + "\n")


def load_baseline(options: OptimizeOptions) -> Adapter:
    """The user's model as an Adapter. A tensor model (an .onnx or TorchScript file) cannot
    say what its outputs mean, so it takes the scenario's model.task where the quality metrics
    know that task (else "other": outputs compared by max abs/rel difference)."""
    task = options.scenario.model.task
    # a Hugging Face folder checks the scenario's task against its head (a contradiction is
    # a one-line error); other references take it below where it fits
    baseline = load(options.model, task=task if task in HF_TASKS else None)
    if (isinstance(baseline, TensorAdapter) and task in TASKS
            and task != baseline.info.task):
        baseline = dataclasses.replace(baseline,
                                       info=dataclasses.replace(baseline.info, task=task))
    return baseline


def check_floor(state: RunState) -> None:
    """Fail in seconds, not after building every variant, when the quality floor (or a metric
    the run reports) does not fit the model's task or needs labels the data lacks."""
    task = state.baseline.info.task
    data = state.options.data
    preflight(quality_floor(state), data.labels is not None,
              quality_metrics(task, data.labels is not None), task, data.source)


def setup(state: RunState, budget: Budget, progress: Progress) -> None:
    opts = state.options
    hw = hardware.detect()
    state.hardware = hw
    state.hardware_label = (f"{hw.cpu_model} ({hw.effective_cores} effective cores"
                            + (f", cgroup quota {hw.cpu_quota:g}" if hw.cpu_quota else "") + ")")
    write_json(state.paths.hardware, hw.to_dict())
    write_scenario(state.paths, opts.scenario,
                   {"hardware": state.hardware_label, "model": opts.model,
                    "data": opts.data.source, "examples": len(opts.data)})
    check_floor(state)
    n_quality = 128 if opts.quick else 300
    chosen = quality_subset(opts.data, n_quality)
    # seconds, before the profile spends minutes: a baseline whose outputs do not vary (a
    # softmax over a reranker's one logit) makes every quality gate pass, so it is an error
    check_outputs_vary(run_outputs(state.baseline, chosen.inputs[:32], batch_size=16,
                                   source=opts.data.source),
                       state.baseline.info.task, f"the baseline {opts.model}",
                       chosen.inputs[:32])
    call_ms, item_ms = probe_costs(state, chosen.inputs)
    state.cost_facts = CostFacts(call_ms=call_ms, item_ms=item_ms, params_m=params_m(state))
    fitted = quality_count(n_quality, item_ms, budget.total_s)
    if fitted < n_quality and not opts.budget_auto:  # an auto budget is sized for them all
        state.notes.append(
            f"quality judged on {fitted} held-out inputs, not {n_quality}: one batch of 16 "
            f"of them took {item_ms:.0f} ms an input here, and {n_quality} would spend more "
            f"than {QUALITY_SHARE:.0%} of the {budget.total_s:.0f} s budget on each quality run")
        chosen = quality_subset(opts.data, fitted)
    state.quality_inputs = chosen.inputs
    state.quality_labels = chosen.labels
    state.quality_groups = chosen.groups
    state.requests = batch1_requests(opts.data.inputs, 400, seed=opts.seed)


def quality_subset(data: HeldOut, n: int) -> HeldOut:
    """The held-out examples quality is judged on: about the first ``n`` (whole query groups
    for pairs), sorted by length so batches pad little. Labels and groups move with their
    inputs; every model sees the same order, and no metric depends on it."""
    rows = data.whole_groups(n)
    if all(is_text_input(data.inputs[i]) for i in rows):
        rows.sort(key=lambda i: text_length(data.inputs[i]))
    return data.take(rows)


def profile_baseline(state: RunState, budget: Budget, progress: Progress) -> None:
    if not budget.allows(NEED_PROFILE_S):
        state.skip("baseline profile", "time budget exhausted", NEED_PROFILE_S)
        return
    quick = state.options.quick or budget.left() < 120
    settings = ProfileSettings(
        batch_sizes=(1,) if quick else (1, 4, 16), requests=40 if quick else 200,
        rounds=2 if quick else 3, stage_seconds=5.0 if quick else 12.0,
        min_round_requests=10 if quick else 25, warmup=3 if quick else 10,
        curve_repeats=3 if quick else 5, curve_seconds=2.0 if quick else 6.0,
        hotspot_calls=1 if quick else 2, cold_start=not quick and budget.left() > 240,
        seed=state.options.seed)
    settings = fit_profile(state, settings, PROFILE_SHARE * budget.total_s)
    ref = state.options.model
    state.profile = profile(
        state.baseline, state.options.data.inputs, settings=settings,
        model_ref=ref if settings.cold_start else None, data_source=state.options.data.source,
        progress=lambda step, done, total: progress.tick(f"{step} {done}/{total}"),
        hardware=state.hardware.to_dict() if state.hardware is not None else None)
    write_json(state.paths.profile, state.profile.to_dict())


def reference_outputs(state: RunState, budget: Budget, progress: Progress) -> None:
    if not budget.allows(NEED_REFERENCE_S):
        state.skip("quality reference outputs", "time budget exhausted", NEED_REFERENCE_S)
        return
    progress.tick(f"baseline outputs on {len(state.quality_inputs)} held-out inputs")
    # in two parts, timed apart: the first CALIBRATION inputs (the shortest, as the list is
    # sorted) are what INT8 passes score on, the whole list what every quality run costs
    ms: list[float] = []
    parts: list[np.ndarray] = []
    for chunk in (state.quality_inputs[:CALIBRATION], state.quality_inputs[CALIBRATION:]):
        if chunk:
            started = time.perf_counter()
            parts.append(run_outputs(state.baseline, chunk, batch_size=16,
                                     source=state.options.data.source))
            ms.append((time.perf_counter() - started) * 1000.0)
    state.reference = np.concatenate(parts)
    n_cal = min(len(state.quality_inputs), CALIBRATION)
    item_ms = sum(ms) / max(len(state.quality_inputs), 1)
    cal_item_ms = ms[0] / max(n_cal, 1)
    # The baseline's batch-1 screening samples, timed now, before any variant loads: an
    # onnxruntime session in this process keeps spinning threads that slow an eager torch
    # baseline timed after it far more than the variant (issue 14: 2.3x vs 5.3x on one pair).
    progress.tick("timing the baseline alone for screening")
    state.base_samples = time_alone(state.baseline.predict, state.requests,
                                    budget_s=_quick_s(budget), min_n=20)
    # and at the batch sizes serving forms, for the same reason (screening.py)
    progress.tick("timing the baseline at the batch sizes serving forms")
    state.base_curve = _served_curve(state, state.baseline.predict, state.base_samples,
                                     _batch_s(budget))
    # the measured times every later step's cost is scaled from (costs.py)
    state.cost_facts = CostFacts(call_ms=float(np.median(state.base_samples)), item_ms=item_ms,
                                 cal_item_ms=cal_item_ms, params_m=params_m(state),
                                 n_quality=len(state.quality_inputs))


def _quick_s(budget: Budget) -> float:
    return min(max(NEED_QUICK_S / 2, budget.left() * 0.02), 6.0)


def _batch_s(budget: Budget) -> float:
    """Seconds for a variant's batched points: a few calls each is enough to see a loss of
    more than the margin (screening.MARGIN) on full batches."""
    return min(_quick_s(budget) / 4, 1.0)


def served_batches(state: RunState) -> list[int]:
    """The sweep's batch sizes this scenario's traffic can form (screening.formable_batches):
    its peak rate within its loosest latency target."""
    cores = state.hardware.effective_cores if state.hardware is not None else 1
    return scenario_batches(state.options.scenario, cores, state.options.quick)


def _served_curve(state: RunState, call: Callable[[Sequence[Any]], Any],
                  batch1_ms: Sequence[float], budget_s: float) -> ScreenCurve:
    """Batch 1 from the sequential timing's samples, the larger sizes timed now."""
    larger = [b for b in served_batches(state) if b > 1]
    curve = time_batches(call, state.options.data.inputs, larger, budget_s=budget_s,
                         seed=state.options.seed)
    if batch1_ms:
        curve = curve.with_point(BatchPoint(1, float(np.median(batch1_ms)), len(batch1_ms)))
    return curve


def build(state: RunState, budget: Budget, progress: Progress,
          builder: Builder | None = None) -> None:
    if not budget.allows(NEED_BUILD_S):
        state.skip("variant building", "time budget exhausted", NEED_BUILD_S)
        return
    make = builder or default_builder
    state.built = make(state, max(budget.until(MARK_BUILD), NEED_BUILD_S / 2), progress)
    if state.options.budget_auto and state.cost_facts is not None \
            and state.cost_facts.export_s is not None:
        # now from the export's measured time
        resize(state, budget, state.cost_facts, later_share=1 - MARK_BUILD)
    for b in state.built:
        if b.skipped:
            state.skip(f"variant {b.variant_id}", b.skipped)
        elif b.is_baseline:
            state.baseline_variant_id = b.variant_id
    note = int8_budget_note(state, budget.spent(), MARK_BUILD)
    if note is not None:
        state.notes.insert(0, note)


def judge(state: RunState, adapter: Adapter, variant_id: str,
          folder: Path | None) -> QualityResult:
    """Run ``adapter`` on the quality subset and judge it against the floor (quality.json)."""
    outputs = run_outputs(adapter, state.quality_inputs, batch_size=16,
                          source=state.options.data.source)
    task = state.baseline.info.task
    assert state.reference is not None  # the reference stage ran (callers check)
    result = evaluate_outputs(
        state.reference, outputs, state.quality_labels, quality_floor(state),
        task, quality_metrics(task, state.quality_labels is not None), seed=state.options.seed,
        baseline_name="baseline",
        variant_name=variant_id, data_source=state.options.data.source,
        groups=state.quality_groups)
    if folder is not None:
        result.save(folder / "quality.json")
    return result


def candidate_from(variant_id: str, title: str, result: QualityResult | None) -> Candidate:
    if result is None:
        return Candidate(variant_id, title, "unknown", None, None)
    check = result.floor_check
    return Candidate(variant_id, title, result.verdict, check.estimate,
                     (check.ci_low, check.ci_high))


def screen(state: RunState, budget: Budget, progress: Progress) -> None:
    """Quick timing and the quality verdict of every built variant, in build order (the order
    of expected gain per second). Batch-1 timing comes first and stops early for a clear loser
    against the fastest passing variant so far (else the baseline); then the variant is timed
    at the batch sizes serving forms (screening.py), and only a variant that lost at every one
    of them is pruned, its quality run skipped: it cannot be recommended, so its seconds go to
    the variants that can (sequential.py)."""
    screened = 0
    rule = StopRule()
    best: tuple[str, list[float]] | None = None  # fastest passing variant so far, its samples
    best_at: dict[int, tuple[str, float]] = {}  # batch -> fastest passing variant there, ms
    for b in state.built:
        if b.skipped or b.is_baseline or b.path is None:
            continue
        need = NEED_QUICK_S + NEED_REFERENCE_S
        # the first two always get screened when any budget is left; later ones only before
        # the screening mark
        if not budget.allows(need) or (screened >= 2 and budget.until(MARK_SCREEN) < need):
            est = (screen_s(b.variant_id, state.cost_facts) if state.cost_facts is not None
                   else need)
            state.skip(f"screening {b.variant_id}", "its share of the time budget was spent "
                       "on the variants built before it", round(est, 1))
            continue
        screened += 1
        progress.tick(f"screening {b.variant_id}")
        state.adapters.add(b.variant_id, b.path)
        adapter = state.adapters[b.variant_id]  # releases the variant screened before it
        ref_name, ref_ms = (best[0], best[1]) if best is not None else (
            "the baseline", _base_samples(state, len(state.base_samples)))
        var_ms, stopped = time_sequential(adapter.predict, state.requests,
                                          reference_ms=ref_ms, budget_s=_quick_s(budget),
                                          rule=rule, reference=ref_name,
                                          seed=state.options.seed)
        served = _screen_served(state, adapter, var_ms, stopped, best_at, budget)
        result = None
        if served.kept and state.reference is not None:
            result = judge(state, adapter, b.variant_id, b.path)
        cand = candidate_from(b.variant_id, b.title, result)
        cand.served = served
        cand.quick = quick_timing(b.variant_id, _base_samples(state, len(var_ms)), var_ms,
                                  seed=state.options.seed)
        state.notes.append(f"screening of {b.variant_id} at the batch sizes serving forms: "
                           + served.describe())
        if not served.kept:
            cand.dropped = f"{stopped}; and it lost at every batch size serving forms" \
                if stopped else "it lost at every batch size serving forms"
            state.skip(f"quality of {b.variant_id}", f"not judged: {cand.dropped}")
        elif cand.quality_verdict == "pass":
            update_best(best_at, b.variant_id, served.curve)
            if stopped is None and (
                    best is None or np.median(var_ms) < np.median(best[1][:len(var_ms)])):
                best = (b.variant_id, var_ms)
        write_json(b.path / "latency.json", {"quick": cand.quick.to_dict()})
        state.candidates.append(cand)
        del adapter  # so loading the next variant frees this one (VariantAdapters)


def _screen_served(state: RunState, adapter: Adapter, var_ms: list[float],
                   stopped: str | None, best_at: dict[int, tuple[str, float]],
                   budget: Budget) -> ServedScreen:
    """The variant timed at the larger batch sizes serving forms and judged at each against
    the fastest passing variant so far there (else the baseline)."""
    curve = _served_curve(state, adapter.predict, var_ms, _batch_s(budget))
    base = state.base_curve or ScreenCurve()
    refs = {p.batch: best_at.get(p.batch, ("the baseline", p.ms)) for p in base.points}
    return judge_batches(curve, refs, curve.batches, stopped_at_1=stopped)


def _base_samples(state: RunState, n: int) -> list[float]:
    """The baseline's latencies on the first ``n`` timing requests: the ones timed before any
    variant loaded (the comparison uses as many as both sides have), else timed now."""
    have = state.base_samples
    if len(have) < min(n, 20):
        for req in state.requests[len(have):n]:
            t0 = time.perf_counter()
            state.baseline.predict(req)
            have.append((time.perf_counter() - t0) * 1000.0)
    return have[:n]


def confirm(state: RunState, budget: Budget, progress: Progress) -> None:
    """Measure the survivors properly, interleaved against the baseline: each side in its own
    process, as each will be served (not with --quick: two process starts cost more than its
    whole comparison, so both sides run here and the figure says so)."""
    keep = 1 if state.options.quick else 3
    survivors = select_survivors(state.candidates, keep=keep)
    with ExitStack() as stack:
        baseline_arm = None
        if survivors and not state.options.quick:
            progress.tick("loading the baseline in a timing process of its own")
            baseline_arm = _arm(state, state.options.model, "the baseline")
            if baseline_arm is not None:
                stack.enter_context(baseline_arm)
        for i, cand in enumerate(survivors):
            remaining = len(survivors) - i
            left = max(budget.until(MARK_CONFIRM), budget.share(0.15))
            per = min(left / remaining, 8.0 if state.options.quick else 40.0)
            if per < NEED_PROPER_S and not (state.options.quick and per >= NEED_QUICK_S):
                state.skip(f"interleaved measurement of {cand.variant_id}",
                           f"only {per:.0f} s left for it; the quick figure stands",
                           NEED_PROPER_S)
                continue
            progress.tick(f"interleaved trials: {cand.variant_id} vs baseline")
            built = state.built_variant(cand.variant_id)
            folder = built.path if built is not None else None
            cand.proper = _proper_timing(state, cand.variant_id, folder, baseline_arm, per)
            if folder is not None:
                write_json(folder / "latency.json",
                           {"quick": cand.quick.to_dict() if cand.quick else None,
                            "proper": cand.proper.to_dict()})


def _proper_timing(state: RunState, variant_id: str, folder: Path | None,
                   baseline_arm: ArmProcess | None, budget_s: float) -> Timing:
    """The interleaved comparison, in two processes when the baseline runs in one and the
    variant loads in another; else both here (Timing.where says which)."""
    seed = state.options.seed + 1
    arm = (_arm(state, str(folder), variant_id)
           if baseline_arm is not None and folder is not None else None)
    if baseline_arm is not None and arm is not None:
        with arm:
            try:
                return measure_against_baseline(
                    run_interleaved, baseline_arm, arm, variant_id, state.requests,
                    kind="proper", budget_s=budget_s, seed=seed, own_processes=True)
            except ArmFailed as exc:
                state.notes.append(f"{variant_id} timed against the baseline in this process: "
                                   f"{exc}")
    adapter = state.adapters[variant_id]
    timing = measure_against_baseline(
        run_interleaved, state.baseline.predict, adapter.predict, variant_id, state.requests,
        kind="proper", budget_s=budget_s, seed=seed)
    del adapter  # so loading the next survivor frees this one (VariantAdapters)
    return timing


def _arm(state: RunState, ref: str, what: str) -> ArmProcess | None:
    """``ref`` loaded in a timing process of its own, or None (with a note) when it cannot be."""
    try:
        return ArmProcess(ref)
    except (ArmFailed, OSError) as exc:
        state.notes.append(f"{what} could not be loaded in a process of its own ({exc}); its "
                           "interleaved comparison ran both sides in this process")
        return None


def input_options(state: RunState, budget: Budget, progress: Progress) -> None:
    data = state.options.data
    notes: list[str] = []
    cache = cache_estimate(data.inputs, f"held-out data {data.source}")
    opts = InputOptions(cache, None, None, None, None, notes)
    state.input_options = opts
    variant_id, adapter = best_adapter(state)
    texts = [x for x in data.inputs if is_text_input(x)]
    if not texts or not hasattr(adapter, "pre") or not hasattr(adapter, "token_lengths"):
        notes.append("input trimming and length bucketing apply to text models only")
        return
    lengths = adapter.token_lengths(texts)
    opts.trim_length, opts.truncated_share = trim_length_for(lengths, keep=0.99)
    current = adapter.pre.max_length
    if not budget.allows(2 * NEED_INPUTS_S):
        state.skip("input trimming and bucketing timings", "time budget exhausted",
                   2 * NEED_INPUTS_S)
        return
    per = min(budget.share(0.4), 12.0)
    if opts.trim_length < current:
        progress.tick(f"timing input trimming on {variant_id}")
        opts.trimming = measure_trimming(adapter, texts, opts.trim_length, compare=run_interleaved,
                                         budget_s=per / 2, seed=state.options.seed)
    else:
        notes.append(f"the 99th-percentile input ({opts.trim_length} tokens) already fits the "
                     f"max length {current}; trimming would cut nothing worth measuring")
    if len(texts) >= 32:
        progress.tick(f"timing length bucketing on {variant_id}")
        opts.bucketing = measure_bucketing(adapter, texts, lengths, compare=run_interleaved,
                                           budget_s=per / 2, seed=state.options.seed)


def token_lengths(adapter: Adapter, inputs: Sequence[Any]) -> list[int] | None:
    texts = [x for x in inputs if is_text_input(x)]
    if not texts or not hasattr(adapter, "token_lengths"):
        return None
    max_len = getattr(getattr(adapter, "pre", None), "max_length", None)
    lengths = np.asarray(adapter.token_lengths(texts))
    return list(np.minimum(lengths, max_len) if max_len else lengths)
