"""advise --measure MODEL: a quick measurement on this machine that replaces the estimated
diagnosis with measured figures where it can, and says which is which.

What is measured (measure.stages, batch 1, after a warm-up): the end-to-end latency and the
time of each stage (preprocess, forward, postprocess, overhead) of the typical request and of
the slow tail. What stays an estimate: every option's impact (measuring variants is optimize's
job) and every queueing figure (they depend on the production traffic). The machine measured
here is named in every measured figure; it is usually not the target hardware.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from infertune.config import Scenario
from infertune.report.schema import (
    DiagnosisItem,
    Figure,
    Report,
    Series,
    StageGroup,
    StageTime,
)

STAGE_NAMES = {"preprocess": "preprocessing / tokenisation", "forward": "forward pass",
               "postprocess": "postprocessing", "overhead": "glue between stages"}
CDF_POINTS = 50


def add_measurements(report: Report, scenario: Scenario, model_ref: str, *,
                     requests: int = 200, budget_s: float = 20.0,
                     load: Callable[[str], Any] | None = None,
                     hardware_text: str | None = None) -> Report:
    """Measure ``model_ref`` here and return ``report`` with the measured diagnosis added."""
    from infertune.measure.stages import StageReport, time_requests
    from infertune.models import load as load_model

    adapter = (load or load_model)(model_ref)
    where = hardware_text or describe_this_machine()
    inputs = _inputs(adapter, model_ref)
    batches = [[inputs[i % len(inputs)]] for i in range(requests)]
    time_requests(adapter, batches[: min(10, requests)])  # warm-up, not recorded
    samples = time_requests(adapter, batches, budget_s=budget_s, min_requests=min(30, requests))
    stages = StageReport.from_samples(samples)
    n = len(samples)
    basis_what = f"{model_ref} at batch 1"
    return _apply(report, stages, np.asarray(samples.e2e), n, where, basis_what)


def describe_this_machine() -> str:
    from infertune.hardware import detect

    info = detect()
    text = f"{info.cpu_model} ({info.effective_cores} effective cores)"
    if info.gpus:
        text += " with " + ", ".join(g.name for g in info.gpus)
    return f"this machine, {text}"


def _inputs(adapter: Any, model_ref: str) -> Sequence[Any]:
    if model_ref == "minilm":
        from infertune.data import default_heldout

        return default_heldout().inputs
    return adapter.sample_inputs(32)


def _apply(report: Report, stages: Any, e2e: np.ndarray, n: int, where: str,
           what: str) -> Report:
    def measured(value: float, label: str) -> Figure:
        return Figure.measured(round(value, 3), "ms", where, n, what=f"{label}, {what}")

    items = [DiagnosisItem(
        stage=STAGE_NAMES.get(name, name), likelihood=_likelihood(stages.share_p50[name]),
        reason=(f"measured here: {stages.share_p50[name]:.1f} % of the typical request and "
                f"{stages.share_p99[name]:.1f} % of the slowest 1 %"),
        time=measured(stages.stage_ms(name, tail=False), f"mean {name} time, typical request"))
        for name in STAGE_NAMES if name in stages.share_p50]
    e2e_summary = stages.summaries["e2e"]
    figures = dict(report.diagnosis.figures)
    for key in ("p50", "p95", "p99"):
        figures[f"measured_e2e_{key}"] = measured(e2e_summary.p(float(key[1:])),
                                                 f"end-to-end {key}")
    estimated = [it for it in report.diagnosis.items if it.stage in ("queueing", "cold starts")]
    diagnosis = report.diagnosis.model_copy(update={
        "items": estimated + items, "figures": figures,
        "summary": report.diagnosis.summary + f" Measured on {where}: the "
                   f"{STAGE_NAMES.get(stages.dominant_p50, stages.dominant_p50)} dominates the "
                   "typical request."})
    ordered = np.sort(e2e)
    idx = np.linspace(0, len(ordered) - 1, min(CDF_POINTS, len(ordered))).astype(int)
    cdf = Series(label="baseline (measured here)", x_unit="ms", y_unit="fraction",
                 points=[(float(ordered[i]), (i + 1) / len(ordered)) for i in idx],
                 source="measured", basis=f"measured on {where} with {n} samples, {what}")
    group = StageGroup(label="baseline, typical request", stages=[
        StageTime(stage=name, time=measured(stages.stage_ms(name, tail=False), f"mean {name}"))
        for name in STAGE_NAMES if name in stages.share_p50])
    plots = report.plots.model_copy(update={"latency_cdf": [cdf], "stage_breakdown": [group]})
    note = (f"--measure: stage times and end-to-end latency were measured on {where} ({what}, "
            f"{n} requests); option impacts and queueing figures remain estimates, and the "
            f"target hardware ({report.hardware}) may differ from this machine.")
    return report.model_copy(update={"diagnosis": diagnosis, "plots": plots,
                                     "notes": [*report.notes, note]})


def _likelihood(share_percent: float) -> str:
    if share_percent >= 50:
        return "dominant"
    return "significant" if share_percent >= 15 else "minor"
