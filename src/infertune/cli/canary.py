"""`infertune canary --server URL --release NAME [--steps 10,50,100] [--prometheus URL]`

Measures the request rate first (the baseline, canary at 0%), sizes the steps and the canary
answers each step needs so its gates can catch a p95 +20%, outputs disagreeing at twice the
limit and an error rate 5 points up (rollout/canary_plan.py), prints the plan and its expected
time to a decision, and refuses (exit 1, canary left at 0%) a plan that cannot decide within
--decide-within-s, naming the rate or time that would; explicit --steps / --min-step-samples
win. Then it moves the server's canary through the steps and judges the gates (errors, p95 and p99
latency, agreement with the stable release's outputs, and the business metric when feedback
exists) at every poll. Statistics: beta-binomial mixture confidence sequences, always valid
under continuous monitoring, alpha split over the gates: a canary no worse than the stable is
rolled back with probability at most --alpha over the whole rollout. Exit 0 when promoted, 1
when rolled back (the reason names the gate, its estimate, interval and sample sizes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
import uvicorn

from infertune.errors import ConfigError, UserError
from infertune.jsonfile import write_json
from infertune.rollout.analysis import (
    CANARY,
    STABLE,
    ArmPrometheus,
    Arms,
    analysis_app,
    judge_once,
    pod_gates,
)
from infertune.rollout.canary_plan import Sizing
from infertune.rollout.client import RouterClient, server_client
from infertune.rollout.controller import CanaryController, CanaryOutcome, StepPlan
from infertune.rollout.gates import METHOD, GateConfig, GateResult
from infertune.rollout.observe import PrometheusMetrics, ServerMetrics

HELP = ("Measure the traffic, size the canary's steps from it, step the traffic up judging "
        "latency, errors, output agreement and the business metric with always-valid "
        "statistics; promote or roll back.")
ANALYSIS_HELP = ("Serve the always-valid canary verdict over two arms' Prometheus series for "
                 "Argo Rollouts (GET /v1/analysis) and Flagger (POST /v1/flagger/check, "
                 "/v1/flagger/promote).")

Server = Annotated[str | None, typer.Option("--server", help="http://host:port")]
Release = Annotated[str | None, typer.Option("--release", help="the server's canary")]
Steps = Annotated[str | None, typer.Option(
    "--steps", help="traffic percentages (default: planned from the rate)")]
Prometheus = Annotated[str | None, typer.Option(
    "--prometheus", help="read counts by PromQL from this Prometheus URL")]
ApiKeyEnv = Annotated[str, typer.Option("--api-key-env")]
Alpha = Annotated[float, typer.Option(
    "--alpha", min=0.0001, max=0.5, help="false-rollback level, whole rollout")]
MinStepSamples = Annotated[int | None, typer.Option(
    "--min-step-samples", min=1, help="new canary answers per step (default: sized to catch "
    "the effects)")]
BaselineSamples = Annotated[int, typer.Option("--baseline-samples", min=1)]
PollS = Annotated[float, typer.Option("--poll-s", min=0.01)]
StepTimeoutS = Annotated[float | None, typer.Option(
    "--step-timeout-s", min=1, help="default: twice the plan's slowest step")]
DecideWithinS = Annotated[float, typer.Option(
    "--decide-within-s", min=1, help="refuse a plan expected to take longer")]
RateWindowS = Annotated[float, typer.Option(
    "--rate-window-s", min=0.1, help="measure the request rate this long")]
MaxDisagreement = Annotated[float, typer.Option(
    "--max-disagreement", min=0.0, max=0.99,
    help="largest share of outputs allowed to disagree with the stable's")]
BusinessMetric = Annotated[str | None, typer.Option("--business-metric")]
JsonOut = Annotated[Path | None, typer.Option("--json", help="write the outcome")]
ShadowGate = Annotated[bool, typer.Option(
    "--shadow-gate", help="first judge the server's shadow release (the canary's build) on "
    "mirrored traffic; no canary traffic until it passes")]
JudgeOnceFlag = Annotated[bool, typer.Option(
    "--judge-once", help="print one verdict over the counts so far and exit (1 on fail, 0 on "
    "pass or wait): for an Argo Rollouts Job metric")]
ArmLabel = Annotated[str | None, typer.Option(
    "--arm-label", help="--judge-once on pods: the label telling the arms apart, e.g. "
    "rollouts_pod_template_hash (needs --prometheus)")]
CanaryValue = Annotated[str | None, typer.Option("--canary-value")]
StableValue = Annotated[str | None, typer.Option("--stable-value")]


def parse_steps(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise ConfigError(f"--steps {text!r}: not a comma-separated list of percentages; "
                          "pass e.g. 1,5,25,50,100") from exc


@dataclass(frozen=True)
class CanaryOptions:
    """``infertune canary --server URL --release NAME``: the rollout's gates and steps.
    ``steps`` and ``min_step_samples`` both given fix the plan; otherwise it is sized from
    the measured request rate."""

    server: str
    release: str
    steps: tuple[float, ...] | None = None
    prometheus: str | None = None
    api_key_env: str = "INFERTUNE_API_KEY"
    alpha: float = 0.05
    min_step_samples: int | None = None
    baseline_samples: int = 100
    poll_s: float = 1.0
    step_timeout_s: float | None = None
    decide_within_s: float = 300.0
    rate_window_s: float = 20.0
    max_disagreement: float = 0.05
    business_metric: str | None = None
    json_out: Path | None = None
    shadow_gate: bool = False

    def gate_config(self) -> GateConfig:
        return GateConfig(alpha=self.alpha, max_disagreement=self.max_disagreement,
                          min_samples=min(self.min_step_samples or self.baseline_samples,
                                          self.baseline_samples))

    def step_plan(self) -> StepPlan:
        return StepPlan(steps=self.steps or StepPlan.steps,
                        min_step_samples=self.min_step_samples or StepPlan.min_step_samples,
                        baseline_samples=self.baseline_samples, poll_s=self.poll_s,
                        step_timeout_s=self.step_timeout_s or StepPlan.step_timeout_s,
                        business_metric=self.business_metric)

    def sizing(self) -> Sizing | None:
        """None when the steps and their samples are given (a fixed plan)."""

        if self.steps is not None and self.min_step_samples is not None:
            return None
        return Sizing(decide_within_s=self.decide_within_s, rate_window_s=self.rate_window_s,
                      steps=self.steps, step_samples=self.min_step_samples)


@dataclass(frozen=True)
class JudgeOnce:
    """``infertune canary --judge-once``: one verdict over two pod arms in Prometheus
    (``arm_label``), or over a router's canary and stable (``server``, ``release``)."""

    server: str | None = None
    release: str | None = None
    prometheus: str | None = None
    api_key_env: str = "INFERTUNE_API_KEY"
    alpha: float = 0.05
    max_disagreement: float = 0.05
    baseline_samples: int = 100
    arm_label: str | None = None
    canary_value: str | None = None
    stable_value: str | None = None
    json_out: Path | None = None


def canary(server: Server = None, release: Release = None, steps: Steps = None,
           prometheus: Prometheus = None, api_key_env: ApiKeyEnv = "INFERTUNE_API_KEY",
           alpha: Alpha = 0.05, min_step_samples: MinStepSamples = None,
           baseline_samples: BaselineSamples = 100, poll_s: PollS = 1.0,
           step_timeout_s: StepTimeoutS = None, decide_within_s: DecideWithinS = 300.0,
           rate_window_s: RateWindowS = 20.0, max_disagreement: MaxDisagreement = 0.05,
           business_metric: BusinessMetric = None, json_out: JsonOut = None,
           shadow_gate: ShadowGate = False, judge_once: JudgeOnceFlag = False,
           arm_label: ArmLabel = None, canary_value: CanaryValue = None,
           stable_value: StableValue = None) -> None:
    if judge_once:
        _judge_once(JudgeOnce(server, release, prometheus, api_key_env, alpha,
                              max_disagreement, baseline_samples, arm_label, canary_value,
                              stable_value, json_out))
        return
    if server is None or release is None:
        raise ConfigError("canary needs --server URL and --release NAME (or --judge-once "
                          "with --prometheus and --arm-label)")
    run(CanaryOptions(server, release, parse_steps(steps) if steps is not None else None,
                      prometheus, api_key_env, alpha, min_step_samples, baseline_samples,
                      poll_s, step_timeout_s, decide_within_s, rate_window_s,
                      max_disagreement, business_metric, json_out, shadow_gate))


def register(app: typer.Typer) -> None:
    app.command("canary", help=HELP)(canary)
    register_analysis(app)  # `infertune analysis`: the same gates, for Argo Rollouts/Flagger


def run(options: CanaryOptions) -> None:
    """Measure, size, step and judge; exit 0 promoted, 1 (UserError) rolled back."""

    config, plan, sizing = options.gate_config(), options.step_plan(), options.sizing()
    _echo_start(options, config, sizing)
    shown: dict[float, int] = {}

    def on_look(weight: float, results: list[GateResult]) -> None:
        shown[weight] = shown.get(weight, 0) + 1

    with server_client(options.server, options.api_key_env, os.environ) as client:
        controller = CanaryController(RouterClient(client), _source(client, options.prometheus),
                                      config, plan, on_look=on_look,
                                      sizing=sizing, on_plan=_echo_plan,
                                      shadow_gate=options.shadow_gate)
        if options.step_timeout_s is not None:
            controller.step_timeout_s = options.step_timeout_s
        outcome = controller.run(options.release)
    _finish(options, outcome, shown)


def _echo_start(options: CanaryOptions, config: GateConfig, sizing: Sizing | None) -> None:
    typer.echo(f"canary {options.release}: gates judged by {METHOD}; false-rollback level "
               f"alpha={options.alpha:g} over the whole rollout ({config.alpha_per_gate:.4g} "
               "per gate)" + ("" if sizing is None else f"; measuring the request rate for "
                              f"{options.rate_window_s:g} s at 0% to size the plan"), err=True)


def _echo_plan(sized: Any) -> None:
    for line in sized.lines():
        typer.echo(f"plan: {line}", err=True)


def _finish(options: CanaryOptions, outcome: CanaryOutcome, shown: dict[float, int]) -> None:
    """Each step's verdict and gates, the JSON outcome, then promoted or rolled back."""
    for step in outcome.steps:
        typer.echo(f"step {step.weight:g}%: {step.verdict} after {step.seconds:.1f} s, "
                   f"{step.canary_answers} canary answers, {shown.get(step.weight, 0)} "
                   "looks", err=True)
        for gate in step.gates:
            typer.echo(f"  {gate.sentence()}", err=True)
    if options.json_out is not None:
        write_json(options.json_out, outcome.to_dict())
    if outcome.decision == "promoted":
        typer.echo(f"promoted {options.release} to 100%")
        return
    # exit 1 like an unmet quality floor: the release failed its gates (the command worked)
    raise UserError(f"rolled back {options.release} {outcome.reason} (rollback call answered "
                    f"in {(outcome.rollback_seconds or 0) * 1000:.0f} ms)")


def _source(client: Any, prometheus: str | None) -> Any:
    """The router's /metrics, or PromQL against --prometheus."""

    if prometheus is None:
        return ServerMetrics(client)
    return PrometheusMetrics(httpx.Client(base_url=prometheus.rstrip("/"), timeout=10))


def _judge_once(judge: JudgeOnce) -> None:
    """One verdict, printed as JSON (and written to ``judge.json_out``); exit 1 on fail."""
    judged = _judge_pods(judge) if judge.arm_label is not None else _judge_router(judge)
    text = judged.model_dump_json(indent=2)
    if judge.json_out is not None:
        write_json(judge.json_out, judged.model_dump(mode="json"))
    typer.echo(text)
    if judged.verdict == "fail":
        raise UserError(f"the canary fails its gates: {judged.reason}")


def _judge_pods(judge: JudgeOnce) -> Any:
    prometheus, canary_value, stable_value = judge.prometheus, judge.canary_value, \
        judge.stable_value
    if prometheus is None or canary_value is None or stable_value is None:
        raise ConfigError("--judge-once --arm-label needs --prometheus URL, --canary-value "
                          "and --stable-value")
    assert judge.arm_label is not None
    pair = Arms(judge.arm_label, canary_value, stable_value)
    with httpx.Client(base_url=prometheus.rstrip("/"), timeout=10) as prom:
        snap = ArmPrometheus(prom, pair).snapshot()
    return judge_once(snap, CANARY, STABLE, pod_gates(judge.alpha, judge.max_disagreement),
                      judge.baseline_samples)


def _judge_router(judge: JudgeOnce) -> Any:
    if judge.server is None or judge.release is None:
        raise ConfigError("--judge-once needs --server URL and --release NAME, or "
                          "--prometheus URL with --arm-label, --canary-value, "
                          "--stable-value")
    with server_client(judge.server, judge.api_key_env, os.environ) as client:
        stable = RouterClient(client).state().stable
        snap = _source(client, judge.prometheus).snapshot()
    config = GateConfig(alpha=judge.alpha, max_disagreement=judge.max_disagreement,
                        min_samples=judge.baseline_samples)
    return judge_once(snap, judge.release, stable, config, judge.baseline_samples)


Port = Annotated[int, typer.Option("--port", min=1, max=65535)]
PrometheusUrl = Annotated[str, typer.Option("--prometheus", help="Prometheus URL")]
Host = Annotated[str, typer.Option("--host")]
AnalysisAlpha = Annotated[float, typer.Option("--alpha", min=0.0001, max=0.5)]


def analysis(prometheus: PrometheusUrl, host: Host = "127.0.0.1", port: Port = 8080,
             alpha: AnalysisAlpha = 0.05, baseline_samples: BaselineSamples = 100) -> None:
    client = httpx.Client(base_url=prometheus.rstrip("/"), timeout=10)

    def source_for(arms: Arms) -> ArmPrometheus:
        return ArmPrometheus(client, arms)

    app_ = analysis_app(source_for, pod_gates(alpha, 0.05), baseline_samples)
    typer.echo(f"analysis endpoint on http://{host}:{port} reading {prometheus}", err=True)
    uvicorn.run(app_, host=host, port=port, log_level="warning")


def register_analysis(app: typer.Typer) -> None:
    app.command("analysis", help=ANALYSIS_HELP)(analysis)
