"""advise --measure MODEL: a quick measurement on this machine that replaces the estimated
diagnosis with measured figures where it can, and says which is which.

What is measured (measure.stage_timers, batch 1, after a warm-up): the end-to-end latency and the
time of each stage (preprocess, forward, postprocess, overhead) of the typical request and of
the slow tail. For Hugging Face text models it also builds two variants in a temporary folder
(``ort_fused`` and ``ort_int8_dynamic_per_channel``, small calibration set; built by
optimize.quickcheck, which the CLI hands in: report/ builds no variants) and compares each
with the baseline by interleaved A/B at batch 1: the p50/p95 impact of the matching options
("ort-fusion", "int8-cpu") becomes the measured change. What stays an estimate: the other
impact fields (p99, throughput, cost), every other option, and every queueing figure (they
depend on the production traffic). The machine measured here is named in every measured
figure; it is usually not the target hardware.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from infertune.config import Scenario
from infertune.data import default_heldout
from infertune.hardware import HardwareInfo, detect
from infertune.measure.diagnosis import stage_likelihood
from infertune.measure.stage_timers import StageReport, time_requests
from infertune.models import load as load_model
from infertune.models.adapter import Adapter
from infertune.optimize.passes.registry import PassFactory, as_registry
from infertune.optimize.quickcheck import CheckVariants, VariantCheck
from infertune.report.schema import (
    IN_PROCESS_ARTIFACT,
    DiagnosisItem,
    Figure,
    Option,
    Report,
    Series,
    StageGroup,
    StageTime,
)

STAGE_NAMES = {"preprocess": "preprocessing / tokenisation", "forward": "forward pass",
               "postprocess": "postprocessing", "overhead": "glue between stages"}
CDF_POINTS = 50
VARIANT_INPUTS = 32  # calibration and A/B inputs: enough to cover lengths, quick to build


def variant_options(registry: Mapping[str, PassFactory] | None = None) -> dict[str, str]:
    """Pass -> the knowledge-base option whose p50/p95 impact its variant measures, as each
    pass declares it (``PassFacts.option``), in the text plan's order."""
    entries = [e for e in as_registry(registry).entries() if e.facts.option is not None]
    slots = [(slot.rank if (slot := e.facts.plan("text")) is not None else 1 << 30, e.name,
              e.facts.option) for e in entries]
    return {name: option for _, name, option in sorted(slots) if option is not None}


# variant pass -> the knowledge-base option whose p50/p95 impact it measures
VARIANT_OPTIONS = variant_options()


def add_measurements(report: Report, scenario: Scenario, model_ref: str, *,
                     requests: int = 200, budget_s: float = 20.0,
                     load: Callable[[str], Adapter] | None = None,
                     hardware_text: str | None = None, check: CheckVariants | None = None,
                     variant_budget_s: float = 12.0,
                     hardware: HardwareInfo | None = None) -> Report:
    """Measure ``model_ref`` here and return ``report`` with the measured diagnosis added and,
    given ``check`` (optimize.quickcheck.check_variants: it builds the variants, this module
    does not), the measured p50/p95 impact of the options whose variants it can build here for
    a Hugging Face text model (each A/B within ``variant_budget_s``). ``hardware``: a
    HardwareInfo for the passes (default: detected)."""
    adapter = (load or load_model)(model_ref)
    where = hardware_text or describe_this_machine()
    inputs = _inputs(adapter, model_ref)
    batches = [[inputs[i % len(inputs)]] for i in range(requests)]
    time_requests(adapter, batches[: min(10, requests)])  # warm-up, not recorded
    samples = time_requests(adapter, batches, budget_s=budget_s, min_requests=min(30, requests))
    stages = StageReport.from_samples(samples)
    n = len(samples)
    basis_what = f"{model_ref} at batch 1"
    if check is not None:
        report, options_text = measure_variants(
            report, adapter, list(inputs)[:VARIANT_INPUTS], where, check,
            budget_s=variant_budget_s, hardware=hardware)
    else:
        options_text = "option impacts and queueing figures remain estimates"
    return _apply(report, stages, np.asarray(samples.e2e), n, where, basis_what, options_text)


def measure_variants(report: Report, adapter: Adapter, inputs: Sequence[Any], where: str,
                     check: CheckVariants, *, budget_s: float = 12.0,
                     hardware: HardwareInfo | None = None) -> tuple[Report, str]:
    """Have ``check`` build and A/B the variants behind the report's "ort-fusion" / "int8-cpu"
    options against ``adapter`` at batch 1 on ``inputs``, and put the measured p50/p95
    changes in those options. Returns the report and a sentence saying what was measured."""
    kind = getattr(adapter.info, "kind", "unknown")
    if kind != "text":
        return report, ("option impacts and queueing figures remain estimates (variants were "
                        "not measured: building them here needs a Hugging Face text model; "
                        f"this model is of kind {kind!r})")
    present = {o.id for o in report.options}
    wanted = [name for name, oid in VARIANT_OPTIONS.items() if oid in present]
    if not wanted:
        return report, ("option impacts and queueing figures remain estimates (no option "
                        "in this report has a variant that can be measured here)")
    impacts: dict[str, dict[str, Figure]] = {}
    skipped: dict[str, str] = {}
    for result in check(adapter, inputs, wanted, budget_s, hardware):
        if result.comparison is None:
            skipped[result.pass_name] = result.skipped or "not built"
        else:
            impacts[VARIANT_OPTIONS[result.pass_name]] = _impact_figures(result, where)
    options = [_measured_option(o, impacts[o.id]) if o.id in impacts else o
               for o in report.options]
    measured = [f"{oid} p50 and p95 ({name} against the baseline)"
                for name, oid in VARIANT_OPTIONS.items() if oid in impacts]
    text = (f"measured here at batch 1: {', '.join(measured) or 'no option impact'}"
            + "".join(f"; {name} not measured: {why}" for name, why in skipped.items())
            + "; still estimates: those options' other impact figures (p99, throughput, "
              "cost), every other option's impact, and the queueing figures")
    return report.model_copy(update={"options": options}), text


def _impact_figures(result: VariantCheck, where: str) -> dict[str, Figure]:
    """p50/p95 changes (percent, negative = faster) with the CI and verdict in the basis."""
    cmp = result.comparison
    assert cmp is not None
    quality = ""
    agreement = result.agreement
    if agreement is not None:
        quality = (f"; agreement with the baseline: mean cosine {agreement.mean_cosine:.4f}, "
                   f"min {agreement.min_cosine:.4f} on {agreement.n_samples} inputs")
    figures = {}
    for key in ("p50", "p95"):
        est = getattr(cmp.stats, key)
        ci = f"{(est.low - 1) * 100:+.1f} to {(est.high - 1) * 100:+.1f} %"
        verdict = (est.verdict if est.conclusive
                   else "inconclusive: no change is claimed beyond the noise")
        what = (f"{key} of {result.pass_name} against the baseline, interleaved A/B at batch 1, "
                f"{cmp.trials} trials, {int(est.confidence * 100)} % CI {ci}, {verdict}"
                f"{quality}")
        # the two sides' own percentiles: the figures the change is the ratio of
        sides = [Figure.measured(round(summary.p(float(key[1:])), 3), "ms", where,
                                 summary.count, what=f"{key} of the {side}, interleaved A/B",
                                 artifact=IN_PROCESS_ARTIFACT)
                 for side, summary in (("baseline", cmp.a_summary),
                                       (result.pass_name, cmp.b_summary))]
        figures[key] = Figure.measured(round((est.ratio - 1) * 100, 1) + 0.0,
                                       f"% change in {key}", where, cmp.stats.n_b, what=what,
                                       artifact=IN_PROCESS_ARTIFACT, inputs=sides)
    return figures


def _measured_option(option: Option, figures: dict[str, Figure]) -> Option:
    impact = option.impact.model_copy(update=figures)
    note = ("p50/p95 measured on this machine by advise --measure; the other impact figures "
            "are estimates")
    return option.model_copy(update={"impact": impact, "source": "measured",
                                     "sources": [*option.sources, note]})


def describe_this_machine() -> str:
    info = detect()
    text = f"{info.cpu_model} ({info.effective_cores} effective cores)"
    if info.gpus:
        text += " with " + ", ".join(g.name for g in info.gpus)
    return f"this machine, {text}"


def _inputs(adapter: Adapter, model_ref: str) -> Sequence[Any]:
    if model_ref == "minilm":
        return default_heldout().inputs
    return adapter.sample_inputs(32)


def _apply(report: Report, stages: StageReport, e2e: np.ndarray, n: int, where: str,
           what: str, options_text: str) -> Report:
    def measured(value: float, label: str) -> Figure:
        return Figure.measured(round(value, 3), "ms", where, n, what=f"{label}, {what}",
                               artifact=IN_PROCESS_ARTIFACT)

    items = [DiagnosisItem(
        stage=STAGE_NAMES.get(name, name), likelihood=stage_likelihood(stages, name),
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
                 source="measured", basis=f"measured on {where} with {n} samples, {what}",
                 artifact=IN_PROCESS_ARTIFACT)
    group = StageGroup(label="baseline, typical request", stages=[
        StageTime(stage=name, time=measured(stages.stage_ms(name, tail=False), f"mean {name}"))
        for name in STAGE_NAMES if name in stages.share_p50])
    plots = report.plots.model_copy(update={"latency_cdf": [cdf], "stage_breakdown": [group]})
    note = (f"--measure: stage times and end-to-end latency were measured on {where} ({what}, "
            f"{n} requests); {options_text}; and the target hardware ({report.hardware}) "
            "may differ from this machine.")
    return report.model_copy(update={"diagnosis": diagnosis, "plots": plots,
                                     "notes": [*report.notes, note]})
