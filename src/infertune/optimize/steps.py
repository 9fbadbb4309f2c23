"""The stages of ``optimize`` (run.py gives the order). Each takes the RunState, the Budget and
the Progress display; each checks the budget first and, when it cannot do its work properly,
records what it skipped and what it would have needed instead of measuring badly."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from infertune.optimize.run import RunState, write_json, write_scenario
from infertune.optimize.search import (
    NEED_PROPER_S,
    NEED_QUICK_S,
    Budget,
    Candidate,
    Progress,
    batch1_requests,
    measure_against_baseline,
    quick_timing,
    select_survivors,
    time_alone,
)

NEED_PROFILE_S = 15.0
NEED_REFERENCE_S = 5.0
NEED_BUILD_S = 20.0
NEED_SERVING_S = 20.0
NEED_INPUTS_S = 10.0
# Marks (fractions of the whole budget) by which each stage must stop starting new work, so
# that a slow stage leaves time for the ones after it.
MARK_BUILD = 0.45
MARK_SCREEN = 0.68
MARK_CONFIRM = 0.80


@dataclass
class BuiltVariant:
    variant_id: str
    path: Path | None
    title: str
    skipped: str | None = None  # why the pass did not build
    is_baseline: bool = False
    manifest: dict[str, Any] = field(default_factory=dict)


def load_baseline(options: Any) -> Any:
    """The user's model as an Adapter. A tensor model (an .onnx or TorchScript file) cannot
    say what its outputs mean, so it takes the scenario's model.task where the quality metrics
    know that task (else "other": outputs compared by max abs/rel difference)."""
    from infertune.models import load
    from infertune.quality.metrics import TASKS

    baseline = load(options.model)
    task = options.scenario.model.task
    if baseline.info.kind == "tensor" and task in TASKS and task != baseline.info.task:
        baseline = dataclasses.replace(baseline,
                                       info=dataclasses.replace(baseline.info, task=task))
    return baseline


def check_floor(state: RunState) -> None:
    """Fail in seconds, not after building every variant, when the quality floor (or a metric
    the run reports) does not fit the model's task or needs labels the data lacks."""
    from infertune.quality.validate import preflight

    task = state.baseline.info.task
    data = state.options.data
    preflight(quality_floor(state), data.labels is not None, quality_metrics(task), task,
              data.source)


def setup(state: RunState, budget: Budget, progress: Progress) -> None:
    from infertune import hardware

    opts = state.options
    hw = hardware.detect()
    state.hardware = hw
    state.hardware_label = (f"{hw.cpu_model} ({hw.effective_cores} effective cores"
                            + (f", cgroup quota {hw.cpu_quota:g}" if hw.cpu_quota else "") + ")")
    write_json(state.paths.hardware, hw.to_dict())
    write_scenario(state.paths, opts.scenario,
                   {"hardware": state.hardware_label, "model": opts.model,
                    "data": opts.data.source, "examples": len(opts.data)})
    if state.baseline is None:
        progress.tick(f"loading {opts.model}")
        state.baseline = load_baseline(opts)
    check_floor(state)
    n_quality = 128 if opts.quick else 300
    # sorted by length: batches of similar length waste little padding, so the quality runs
    # cost less; every model sees the same order, and no metric depends on it
    chosen = list(opts.data.inputs[:n_quality])
    if all(isinstance(x, str) for x in chosen):
        chosen.sort(key=len)
    state.quality_inputs = chosen
    state.requests = batch1_requests(opts.data.inputs, 400, seed=opts.seed)


def profile_baseline(state: RunState, budget: Budget, progress: Progress) -> None:
    from infertune.measure.profile import ProfileSettings, profile

    if not budget.allows(NEED_PROFILE_S):
        state.skip("baseline profile", "time budget exhausted", NEED_PROFILE_S)
        return
    quick = state.options.quick or budget.left() < 120
    wanted = dict(
        batch_sizes=(1,) if quick else (1, 4, 16), requests=40 if quick else 200,
        rounds=2 if quick else 3, stage_seconds=5.0 if quick else 12.0,
        min_round_requests=10 if quick else 25, warmup=3 if quick else 10,
        curve_repeats=3 if quick else 5, curve_seconds=2.0 if quick else 6.0,
        hotspot_calls=1 if quick else 2, cold_start=not quick and budget.left() > 240,
        seed=state.options.seed)
    # only the knobs this version of ProfileSettings has (measure/ owns it)
    known = {f.name for f in dataclasses.fields(ProfileSettings)}
    settings = ProfileSettings(**{k: v for k, v in wanted.items() if k in known})
    ref = state.options.model
    state.profile = profile(
        state.baseline, state.options.data.inputs, settings=settings,
        model_ref=ref if settings.cold_start else None, data_source=state.options.data.source,
        progress=lambda step, done, total: progress.tick(f"{step} {done}/{total}"),
        hardware=state.hardware.to_dict())
    write_json(state.paths.profile, state.profile.to_dict())


def reference_outputs(state: RunState, budget: Budget, progress: Progress) -> None:
    from infertune.quality import run_outputs

    if not budget.allows(NEED_REFERENCE_S):
        state.skip("quality reference outputs", "time budget exhausted", NEED_REFERENCE_S)
        return
    progress.tick(f"baseline outputs on {len(state.quality_inputs)} held-out inputs")
    state.reference = run_outputs(state.baseline, state.quality_inputs, batch_size=16,
                                  source=state.options.data.source)


def build(state: RunState, budget: Budget, progress: Progress, builder: Any) -> None:
    from infertune.optimize.builder import default_builder

    if not budget.allows(NEED_BUILD_S):
        state.skip("variant building", "time budget exhausted", NEED_BUILD_S)
        return
    make = builder or default_builder
    state.built = make(state, max(budget.until(MARK_BUILD), NEED_BUILD_S / 2), progress)
    for b in state.built:
        if b.skipped:
            state.skip(f"variant {b.variant_id}", b.skipped)
        elif b.is_baseline:
            state.baseline_variant_id = b.variant_id


def quality_floor(state: RunState) -> Any:
    from infertune.quality import floor_from_config, parse_floor

    cfg = state.options.scenario.constraints.quality_floor
    if cfg is not None:
        return floor_from_config(cfg)
    task = state.baseline.info.task
    return parse_floor({"embedding": "mean_cosine>=0.99", "classification":
                        "argmax_agreement>=0.99"}.get(task, "max_rel_diff<=0.01"))


def quality_metrics(task: str) -> list[str]:
    return {"embedding": ["mean_cosine", "min_cosine", "knn_agreement@10", "max_abs_diff"],
            "classification": ["argmax_agreement", "max_abs_diff"]}.get(task, ["max_abs_diff"])


def judge(state: RunState, adapter: Any, variant_id: str, folder: Path | None) -> Any:
    """Run ``adapter`` on the quality subset and judge it against the floor (quality.json)."""
    from infertune.quality import evaluate_outputs, run_outputs

    outputs = run_outputs(adapter, state.quality_inputs, batch_size=16,
                          source=state.options.data.source)
    labels = state.options.data.labels
    task = state.baseline.info.task
    result = evaluate_outputs(
        state.reference, outputs,
        labels[:len(state.quality_inputs)] if labels is not None else None, quality_floor(state),
        task, quality_metrics(task), seed=state.options.seed, baseline_name="baseline",
        variant_name=variant_id, data_source=state.options.data.source)
    if folder is not None:
        result.save(folder / "quality.json")
    return result


def candidate_from(variant_id: str, title: str, result: Any) -> Candidate:
    if result is None:
        return Candidate(variant_id, title, "unknown", None, None)
    check = result.floor_check
    return Candidate(variant_id, title, result.verdict, check.estimate,
                     (check.ci_low, check.ci_high))


def screen(state: RunState, budget: Budget, progress: Progress) -> None:
    """Quick timing and the quality verdict of every built variant."""
    from infertune.models import load

    screened = 0
    for b in state.built:
        if b.skipped or b.is_baseline or b.path is None:
            continue
        need = NEED_QUICK_S + NEED_REFERENCE_S
        # the first two always get screened when any budget is left; later ones only before
        # the screening mark
        if not budget.allows(need) or (screened >= 2 and budget.until(MARK_SCREEN) < need):
            state.skip(f"screening {b.variant_id}", "its share of the time budget was spent "
                       "on the variants built before it", need)
            continue
        screened += 1
        progress.tick(f"screening {b.variant_id}")
        adapter = load(b.path)
        state.adapters[b.variant_id] = adapter
        result = judge(state, adapter, b.variant_id, b.path) if state.reference is not None \
            else None
        cand = candidate_from(b.variant_id, b.title, result)
        quick_s = min(max(NEED_QUICK_S / 2, budget.left() * 0.02), 6.0)
        var_ms = time_alone(adapter.predict, state.requests, budget_s=quick_s, min_n=20)
        cand.quick = quick_timing(b.variant_id, _base_samples(state, len(var_ms)), var_ms,
                                  seed=state.options.seed)
        write_json(b.path / "latency.json", {"quick": cand.quick.to_dict()})
        state.candidates.append(cand)


def _base_samples(state: RunState, n: int) -> list[float]:
    """The baseline's latencies on the first ``n`` timing requests (timed once, extended when
    a variant ran through more requests)."""
    have = state.base_samples
    if len(have) < n:
        for req in state.requests[len(have):n]:
            t0 = time.perf_counter()
            state.baseline.predict(req)
            have.append((time.perf_counter() - t0) * 1000.0)
    return have[:n]


def compare_fn() -> Any:
    from infertune.measure.compare import run_interleaved

    return run_interleaved


def confirm(state: RunState, budget: Budget, progress: Progress) -> None:
    """Measure the survivors properly, interleaved against the baseline."""
    keep = 1 if state.options.quick else 3
    survivors = select_survivors(state.candidates, keep=keep)
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
        adapter = state.adapters[cand.variant_id]
        cand.proper = measure_against_baseline(
            compare_fn(), state.baseline.predict, adapter.predict, cand.variant_id,
            state.requests, kind="proper", budget_s=per, seed=state.options.seed + 1)
        folder = _folder(state, cand.variant_id)
        if folder is not None:
            write_json(folder / "latency.json",
                       {"quick": cand.quick.to_dict() if cand.quick else None,
                        "proper": cand.proper.to_dict()})


def _folder(state: RunState, variant_id: str) -> Path | None:
    for b in state.built:
        if b.variant_id == variant_id:
            return b.path
    return None


def best_adapter(state: RunState) -> tuple[str, Any]:
    """The variant the report will recommend (same ranking), and its adapter."""
    from infertune.optimize.runreport import (
        inside_slo,
        rank_options,
        recommended_candidate,
        variant_options,
    )

    ranked = rank_options(state, variant_options(state), inside_slo(state))
    best = recommended_candidate(state, ranked)
    if best is not None:
        return best.variant_id, state.adapters[best.variant_id]
    return state.baseline_variant_id or "baseline", state.baseline


def serving(state: RunState, budget: Budget, progress: Progress) -> None:
    from infertune.optimize.policy import run_sweep

    if not budget.allows(NEED_SERVING_S):
        state.skip("serving-policy sweep", "time budget exhausted", NEED_SERVING_S)
        return
    run_sweep(state, budget, progress)


def candidate_models(state: RunState, budget: Budget, progress: Progress) -> None:
    from infertune.optimize.policy import run_candidates

    if state.options.candidates:
        run_candidates(state, budget, progress)


def input_options(state: RunState, budget: Budget, progress: Progress) -> None:
    from infertune.optimize.inputs import (
        InputOptions,
        cache_estimate,
        measure_bucketing,
        measure_trimming,
        trim_length_for,
    )

    data = state.options.data
    notes: list[str] = []
    cache = cache_estimate(data.inputs, f"held-out data {data.source}")
    opts = InputOptions(cache, None, None, None, None, notes)
    state.input_options = opts
    variant_id, adapter = best_adapter(state)
    texts = [x for x in data.inputs if isinstance(x, str)]
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
        opts.trimming = measure_trimming(adapter, texts, opts.trim_length, compare=compare_fn(),
                                         budget_s=per / 2, seed=state.options.seed)
    else:
        notes.append(f"the 99th-percentile input ({opts.trim_length} tokens) already fits the "
                     f"max length {current}; trimming would cut nothing worth measuring")
    if len(texts) >= 32:
        progress.tick(f"timing length bucketing on {variant_id}")
        opts.bucketing = measure_bucketing(adapter, texts, lengths, compare=compare_fn(),
                                           budget_s=per / 2, seed=state.options.seed)


def token_lengths(adapter: Any, inputs: Sequence[Any]) -> list[int] | None:
    texts = [x for x in inputs if isinstance(x, str)]
    if not texts or not hasattr(adapter, "token_lengths"):
        return None
    max_len = getattr(getattr(adapter, "pre", None), "max_length", None)
    lengths = np.asarray(adapter.token_lengths(texts))
    return list(np.minimum(lengths, max_len) if max_len else lengths)
