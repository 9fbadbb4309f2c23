"""Stage "setup" of ``optimize`` (the first; run.py gives the order): the hardware detected
and written down with the scenario (the start of the ProfileArtifact, which stage "profile
baseline" completes), the quality floor checked against the model's task, the held-out subset
quality is judged on, the probe of the call costs the budget is sized from, and the batch-1
timing requests (these three are live handles and the log's cost facts, kept on the RunState).
``load_baseline`` and ``check_floor`` also run before the run directory exists (run.py), so a
bad reference or floor fails in seconds."""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml

from infertune import hardware
from infertune.config import Scenario
from infertune.data import HeldOut
from infertune.data.text_inputs import is_text_input, text_length
from infertune.jsonfile import write_json
from infertune.models import load
from infertune.models.adapter import Adapter
from infertune.models.loaders import HF_TASKS
from infertune.models.tensor import TensorAdapter
from infertune.optimize.findings import ProfileArtifact
from infertune.optimize.search.budget import Budget
from infertune.optimize.search.costs import CostFacts
from infertune.optimize.search.sizing import QUALITY_SHARE, params_m, probe_costs, quality_count
from infertune.optimize.search.timing import batch1_requests
from infertune.optimize.state import (
    OptimizeOptions,
    RunPaths,
    RunState,
    StageContext,
    quality_floor,
    quality_metrics,
)
from infertune.quality import run_outputs
from infertune.quality.degenerate import check_outputs_vary
from infertune.quality.metrics import TASKS
from infertune.quality.validate import preflight


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


def run(ctx: StageContext) -> ProfileArtifact:
    """The machine (hardware.json, and the scenario written down with it), then the run's
    held-out subset, call costs and timing requests on the state."""
    state, budget = ctx.state, ctx.budget
    opts = state.options
    hw = hardware.detect()
    found = ProfileArtifact(hardware=hw, hardware_label=(
        f"{hw.cpu_model} ({hw.effective_cores} effective cores"
        + (f", cgroup quota {hw.cpu_quota:g}" if hw.cpu_quota else "") + ")"))
    write_json(state.paths.hardware, hw.to_dict())
    write_scenario(state.paths, opts.scenario,
                   {"hardware": found.hardware_label, "model": opts.model,
                    "data": opts.data.source, "examples": len(opts.data)})
    check_floor(state)
    _quality_and_timing_inputs(state, budget)
    return found


def _quality_and_timing_inputs(state: RunState, budget: Budget) -> None:
    """The held-out subset quality is judged on (fitted to the budget), the probe of the call
    costs, and the batch-1 timing requests, onto the state."""
    opts = state.options
    n_quality = 128 if opts.quick else 300
    chosen = quality_subset(opts.data, n_quality)
    # seconds, before the profile spends minutes: a baseline whose outputs do not vary (a
    # softmax over a reranker's one logit) makes every quality gate pass, so it is an error
    check_outputs_vary(run_outputs(state.baseline, chosen.inputs[:32], batch_size=16,
                                   source=opts.data.source),
                       state.baseline.info.task, f"the baseline {opts.model}",
                       chosen.inputs[:32])
    call_ms, item_ms = probe_costs(state, chosen.inputs)
    state.log.cost_facts = CostFacts(call_ms=call_ms, item_ms=item_ms, params_m=params_m(state))
    fitted = quality_count(n_quality, item_ms, budget.total_s)
    if fitted < n_quality and not opts.budget_auto:  # an auto budget is sized for them all
        state.log.notes.append(
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
