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
        canary = (" Roll out behind a canary with the baseline kept for rollback."
                  if label == "Day 5" else "")
        steps.append(PlanStep(
            title=f"{label}: {option.title}",
            detail=f"Verify: {option.verify}. Keep it only if the gain holds and quality stays "
                   f"above the floor.{canary}",
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
        "arrival and start-of-service times per request (the queue wait)",
        "preprocessing or tokenisation time, and the input size (tokens, pixels)",
        "forward-pass time and the batch size it ran in",
        "postprocessing and serialisation time",
        "end-to-end latency at the client, status, and the model version and instance",
    ]
    if task == "generation":
        logs.insert(3, "time to first token and time per output token, and output length")
    metric = quality_metric or "task quality metric"
    return MeasurementPlan(
        log_per_stage=logs,
        compare_variants=(
            "Run baseline and variant on the same target hardware, warmed up, in randomised "
            "interleaved trials at the real input-length mix; report the p50, p95 and p99 ratios "
            "with bootstrap confidence intervals, call a change real only when the interval "
            "excludes no change, and collect a few thousand requests before trusting a p99."
        ),
        quality_and_drift=(
            f"Gate every variant on held-out data against the floor ({metric}), then canary it "
            "beside the baseline on live traffic and compare their outputs; after rollout, track "
            f"the {metric} on a labelled sample every week and the input-length and output-score "
            "distributions every day, and roll back when they leave the range seen in the "
            "held-out check."
        ),
    )
