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
from pathlib import Path
from typing import Annotated, Any

import typer

from infertune.errors import ConfigError, UserError


def parse_steps(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise ConfigError(f"--steps {text!r}: not a comma-separated list of percentages; "
                          "pass e.g. 1,5,25,50,100") from exc


def register(app: typer.Typer) -> None:
    @app.command("canary", help="Measure the traffic, size the canary's steps from it, step "
                 "the traffic up judging latency, errors, output agreement and the business "
                 "metric with always-valid statistics; promote or roll back.")
    def canary(
        server: Annotated[str | None, typer.Option("--server", help="http://host:port")] =
            None,
        release: Annotated[str | None, typer.Option("--release", help="the server's canary")] =
            None,
        steps: Annotated[str | None, typer.Option(
            "--steps", help="traffic percentages (default: planned from the rate)")] = None,
        prometheus: Annotated[str | None, typer.Option(
            "--prometheus", help="read counts by PromQL from this Prometheus URL")] = None,
        api_key_env: Annotated[str, typer.Option("--api-key-env")] = "INFERTUNE_API_KEY",
        alpha: Annotated[float, typer.Option(
            "--alpha", min=0.0001, max=0.5, help="false-rollback level, whole rollout")] = 0.05,
        min_step_samples: Annotated[int | None, typer.Option(
            "--min-step-samples", min=1, help="new canary answers per step (default: "
            "sized to catch the effects)")] = None,
        baseline_samples: Annotated[int, typer.Option("--baseline-samples", min=1)] = 100,
        poll_s: Annotated[float, typer.Option("--poll-s", min=0.01)] = 1.0,
        step_timeout_s: Annotated[float | None, typer.Option(
            "--step-timeout-s", min=1, help="default: twice the plan's slowest step")] = None,
        decide_within_s: Annotated[float, typer.Option(
            "--decide-within-s", min=1, help="refuse a plan expected to take longer")] = 300.0,
        rate_window_s: Annotated[float, typer.Option(
            "--rate-window-s", min=0.1, help="measure the request rate this long")] = 20.0,
        max_disagreement: Annotated[float, typer.Option(
            "--max-disagreement", min=0.0, max=0.99,
            help="largest share of outputs allowed to disagree with the stable's")] = 0.05,
        business_metric: Annotated[str | None, typer.Option("--business-metric")] = None,
        json_out: Annotated[Path | None, typer.Option("--json", help="write the outcome")] =
            None,
        shadow_gate: Annotated[bool, typer.Option(
            "--shadow-gate", help="first judge the server's shadow release (the canary's "
            "build) on mirrored traffic; no canary traffic until it passes")] = False,
        judge_once: Annotated[bool, typer.Option(
            "--judge-once", help="print one verdict over the counts so far and exit (1 on "
            "fail, 0 on pass or wait): for an Argo Rollouts Job metric")] = False,
        arm_label: Annotated[str | None, typer.Option(
            "--arm-label", help="--judge-once on pods: the label telling the arms apart, "
            "e.g. rollouts_pod_template_hash (needs --prometheus)")] = None,
        canary_value: Annotated[str | None, typer.Option("--canary-value")] = None,
        stable_value: Annotated[str | None, typer.Option("--stable-value")] = None,
    ) -> None:
        if judge_once:
            _judge_once(server, release, prometheus, api_key_env, alpha, max_disagreement,
                        baseline_samples, (arm_label, canary_value, stable_value), json_out)
            return
        if server is None or release is None:
            raise ConfigError("canary needs --server URL and --release NAME (or --judge-once "
                              "with --prometheus and --arm-label)")
        from infertune.jsonfile import write_json
        from infertune.rollout.canary_plan import CanaryPlan, Sizing
        from infertune.rollout.client import RouterClient, server_client
        from infertune.rollout.controller import CanaryController, StepPlan
        from infertune.rollout.gates import METHOD, GateConfig, GateResult

        config = GateConfig(alpha=alpha, max_disagreement=max_disagreement,
                            min_samples=min(min_step_samples or baseline_samples,
                                            baseline_samples))
        given = parse_steps(steps) if steps is not None else None
        fixed = given is not None and min_step_samples is not None
        plan = StepPlan(steps=given or StepPlan.steps,
                        min_step_samples=min_step_samples or StepPlan.min_step_samples,
                        baseline_samples=baseline_samples, poll_s=poll_s,
                        step_timeout_s=step_timeout_s or StepPlan.step_timeout_s,
                        business_metric=business_metric)
        sizing = None if fixed else Sizing(decide_within_s=decide_within_s,
                                           rate_window_s=rate_window_s, steps=given,
                                           step_samples=min_step_samples)
        typer.echo(f"canary {release}: gates judged by {METHOD}; false-rollback level "
                   f"alpha={alpha:g} over the whole rollout ({config.alpha_per_gate:.4g} per "
                   "gate)" + ("" if sizing is None else f"; measuring the request rate for "
                              f"{rate_window_s:g} s at 0% to size the plan"), err=True)
        shown: dict[float, int] = {}

        def on_look(weight: float, results: list[GateResult]) -> None:
            shown[weight] = shown.get(weight, 0) + 1

        def on_plan(sized: CanaryPlan) -> None:
            for line in sized.lines():
                typer.echo(f"plan: {line}", err=True)

        with server_client(server, api_key_env, os.environ) as client:
            controller = CanaryController(RouterClient(client), _source(client, prometheus),
                                          config, plan, on_look=on_look, sizing=sizing,
                                          on_plan=on_plan, shadow_gate=shadow_gate)
            if step_timeout_s is not None:
                controller.step_timeout_s = step_timeout_s
            outcome = controller.run(release)
        for step in outcome.steps:
            typer.echo(f"step {step.weight:g}%: {step.verdict} after {step.seconds:.1f} s, "
                       f"{step.canary_answers} canary answers, {shown.get(step.weight, 0)} "
                       "looks", err=True)
            for gate in step.gates:
                typer.echo(f"  {gate.sentence()}", err=True)
        if json_out is not None:
            write_json(json_out, outcome.to_dict())
        if outcome.decision == "promoted":
            typer.echo(f"promoted {release} to 100%")
            return
        # exit 1 like an unmet quality floor: the release failed its gates (the command worked)
        raise UserError(f"rolled back {release} {outcome.reason} (rollback call answered in "
                        f"{(outcome.rollback_seconds or 0) * 1000:.0f} ms)")

    register_analysis(app)  # `infertune analysis`: the same gates, for Argo Rollouts/Flagger


def _source(client: Any, prometheus: str | None) -> Any:
    """The router's /metrics, or PromQL against --prometheus."""
    import httpx

    from infertune.rollout.observe import PrometheusMetrics, ServerMetrics

    if prometheus is None:
        return ServerMetrics(client)
    return PrometheusMetrics(httpx.Client(base_url=prometheus.rstrip("/"), timeout=10))


def _judge_once(server: str | None, release: str | None, prometheus: str | None,
                api_key_env: str, alpha: float, max_disagreement: float,
                baseline_samples: int, arms: tuple[str | None, str | None, str | None],
                json_out: Path | None) -> None:
    """One verdict: over two pod arms in Prometheus, or a router's canary and stable."""
    import httpx

    from infertune.jsonfile import write_json
    from infertune.rollout.analysis import (
        CANARY,
        STABLE,
        ArmPrometheus,
        Arms,
        judge_once,
        pod_gates,
    )
    from infertune.rollout.client import RouterClient, server_client
    from infertune.rollout.gates import GateConfig

    label, canary_value, stable_value = arms
    if label is not None:
        if prometheus is None or canary_value is None or stable_value is None:
            raise ConfigError("--judge-once --arm-label needs --prometheus URL, --canary-value "
                              "and --stable-value")
        pair = Arms(label, canary_value, stable_value)
        with httpx.Client(base_url=prometheus.rstrip("/"), timeout=10) as prom:
            snap = ArmPrometheus(prom, pair).snapshot()
        judged = judge_once(snap, CANARY, STABLE, pod_gates(alpha, max_disagreement),
                            baseline_samples)
    else:
        if server is None or release is None:
            raise ConfigError("--judge-once needs --server URL and --release NAME, or "
                              "--prometheus URL with --arm-label, --canary-value, "
                              "--stable-value")
        with server_client(server, api_key_env, os.environ) as client:
            stable = RouterClient(client).state().stable
            snap = _source(client, prometheus).snapshot()
        config = GateConfig(alpha=alpha, max_disagreement=max_disagreement,
                            min_samples=baseline_samples)
        judged = judge_once(snap, release, stable, config, baseline_samples)
    text = judged.model_dump_json(indent=2)
    if json_out is not None:
        write_json(json_out, judged.model_dump(mode="json"))
    typer.echo(text)
    if judged.verdict == "fail":
        raise UserError(f"the canary fails its gates: {judged.reason}")


def register_analysis(app: typer.Typer) -> None:
    @app.command("analysis", help="Serve the always-valid canary verdict over two arms' "
                 "Prometheus series for Argo Rollouts (GET /v1/analysis) and Flagger "
                 "(POST /v1/flagger/check, /v1/flagger/promote).")
    def analysis(
        prometheus: Annotated[str, typer.Option("--prometheus", help="Prometheus URL")],
        host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
        port: Annotated[int, typer.Option("--port", min=1, max=65535)] = 8080,
        alpha: Annotated[float, typer.Option("--alpha", min=0.0001, max=0.5)] = 0.05,
        baseline_samples: Annotated[int, typer.Option("--baseline-samples", min=1)] = 100,
    ) -> None:
        import httpx
        import uvicorn

        from infertune.rollout.analysis import ArmPrometheus, Arms, analysis_app, pod_gates

        client = httpx.Client(base_url=prometheus.rstrip("/"), timeout=10)

        def source_for(arms: Arms) -> ArmPrometheus:
            return ArmPrometheus(client, arms)

        app_ = analysis_app(source_for, pod_gates(alpha, 0.05), baseline_samples)
        typer.echo(f"analysis endpoint on http://{host}:{port} reading {prometheus}", err=True)
        uvicorn.run(app_, host=host, port=port, log_level="warning")
