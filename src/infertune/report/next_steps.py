"""Report text shared by advise and optimize: the three-step first-week plan, the measurement
plan and the guardrails. Plain language, no code, no figures (those live in Figures)."""

from __future__ import annotations

from collections.abc import Sequence

from infertune.report.schema import MeasurementPlan, Option, PlanStep

GUARDRAILS: tuple[str, ...] = (
    "Estimates are labelled as estimates, with their range and source; only figures marked "
    "measured were measured, on the hardware they name.",
    "Every gain must be confirmed by measurement on the target hardware before rollout.",
    "Check the documentation of the exact framework and serving versions in use: defaults, "
    "supported precisions and fused operators change between versions.",
)


# Where advice alone cannot settle it, the command that measures it on the user's own model.
MEASURE_WITH = {
    "reranking": (
        "`infertune optimize ./your-cross-encoder --scenario SCENARIO --data pairs.jsonl`: it "
        "reads the checkpoint as a reranker, takes rows {query, passage, label} and judges "
        "every variant by NDCG@10 per query with a confidence interval"),
}


def guardrails() -> list[str]:
    return list(GUARDRAILS)


def first_week(options: Sequence[Option], missing: Sequence[str], inside_slo: bool | None,
               measured: bool = False) -> list[PlanStep]:
    """Three steps: measure (or confirm the measurement), the top option, the next option with a
    canary. ``options`` are already ranked."""
    within = [o for o in options if o.within_risk_budget] or list(options)
    focus = "cost per request" if inside_slo else "p95 and p99"
    fill = (f" Fill in the missing facts ({', '.join(missing)})." if missing else "")
    first = PlanStep(
        title="Days 1-2: measure where the time goes" if not measured
        else "Days 1-2: re-measure on the production hardware",
        detail=("Log per-stage timings (queue wait, preprocessing, forward pass, "
                "postprocessing) on the target hardware under real traffic, and confirm whether "
                f"queueing or compute drives the {focus}." + fill),
    )
    steps = [first]
    for label, option in zip(("Days 3-4", "Day 5"), within[:2], strict=False):
        canary = (" Then canary it, keeping the baseline for rollback."
                  if label == "Day 5" else "")
        steps.append(PlanStep(
            title=f"{label}: {option.title}",
            detail=f"Verify: {option.verify}.{canary}",
        ))
    while len(steps) < 3:
        steps.append(PlanStep(
            title="Day 5: decide with the measurements",
            detail="Compare the measured variants against the targets and pick the one to canary; "
                   "if none helps, revisit the diagnosis with the per-stage logs.",
        ))
    return steps


def measurement_plan(task: str | None, quality_metric: str | None) -> MeasurementPlan:
    logs = [
        "queue wait",
        "preprocessing or tokenisation time with the input size",
        "forward-pass time with the batch size",
        "postprocessing time",
        "end-to-end latency with the model version",
    ]
    if task == "generation":
        logs.insert(3, "time to first token and per output token")
    metric = quality_metric or "task quality metric"
    return MeasurementPlan(
        measure_with=MEASURE_WITH.get(task or ""),
        log_per_stage=logs,
        compare_variants=(
            "on the same target hardware, warmed up, in randomised interleaved trials at the real "
            "input mix; a change is real only when the bootstrap confidence interval of the "
            "p95 ratio excludes no change, and a p99 needs a few thousand requests."
        ),
        quality_and_drift=(
            f"gate each variant on held-out data against the floor ({metric}), canary it beside "
            f"the baseline, then track {metric} on a labelled weekly sample and the input and "
            "output distributions daily; roll back when they drift."
        ),
    )
