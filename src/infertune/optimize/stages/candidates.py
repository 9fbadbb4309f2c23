"""Stage "candidate models" of ``optimize``: each --candidate model timed against the
baseline, judged on quality, and tried as a cascade (candidate first, baseline on low
confidence). Writes the candidate parts of extras.json."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from infertune.artifacts import ExtrasFile
from infertune.errors import IncompatibleInputError
from infertune.measure.compare import run_interleaved
from infertune.measure.stage_timers import time_requests
from infertune.models import load
from infertune.models.adapter import Adapter
from infertune.optimize.findings import ModelsArtifact
from infertune.optimize.search.budget import NEED_QUICK_S, Budget, Progress
from infertune.optimize.search.timing import measure_against_baseline
from infertune.optimize.served.cascade_eval import CascadeNotApplicable, evaluate_cascade
from infertune.optimize.stages.screen import candidate_from, judge
from infertune.optimize.state import RunState, StageContext
from infertune.quality import run_outputs


def run(ctx: StageContext) -> ModelsArtifact:
    found = ModelsArtifact()
    if ctx.state.options.candidates:
        run_candidates(ctx.state, ctx.budget, ctx.progress, found)
    return found


def run_candidates(state: RunState, budget: Budget, progress: Progress,
                   found: ModelsArtifact) -> None:
    """Each --candidate model into ``found``: quick timing against the baseline, quality, and a
    cascade (candidate first, baseline on low confidence) when the task has a confidence."""
    out = []
    for ref in state.options.candidates:
        if not budget.allows(NEED_QUICK_S * 3):
            state.skip(f"candidate {ref}", "time budget exhausted", NEED_QUICK_S * 3)
            continue
        progress.tick(f"candidate model {ref}")
        adapter = load(ref)
        cid = f"candidate-{adapter.info.id}"
        try:
            result = judge(state, adapter, cid, None) if state.reference is not None else None
        except IncompatibleInputError as exc:
            state.log.notes.append(f"{cid}: quality not comparable with the baseline ({exc})")
            result = None
        cand = candidate_from(cid, f"candidate model {ref}", result)
        cand.quick = measure_against_baseline(
            run_interleaved, state.baseline.predict, adapter.predict, cid, state.requests,
            kind="quick", budget_s=min(budget.share(0.1), 10.0), seed=state.options.seed)
        found.candidate_models.append(cand)
        if state.reference is None:
            continue
        try:
            cand_out = run_outputs(adapter, state.quality_inputs, batch_size=16)
            lat_c = _latencies(adapter, state.requests[:60])
            lat_b = _latencies(state.baseline, state.requests[:60])
            cascade = evaluate_cascade(state.baseline.info.task, cand_out, state.reference,
                                       lat_c, lat_b, labels=_labels(state), names=(cid,
                                       "baseline"), seed=state.options.seed)
            found.cascades.append(cascade)
            out.append(cascade.to_dict())
        except CascadeNotApplicable as exc:
            state.log.notes.append(f"cascade {cid} -> baseline: not applicable: {exc}")
    ExtrasFile(candidates=[c.to_dict() for c in found.candidate_models],
               cascades=out).save(state.paths.extras)


def _labels(state: RunState) -> Any:
    return state.quality_labels


def _latencies(adapter: Adapter, requests: Sequence[Sequence[Any]]) -> list[float]:
    adapter.predict(requests[0])
    return list(np.asarray(time_requests(adapter, requests).e2e))
