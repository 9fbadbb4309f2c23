"""`infertune canary --server URL --release NAME [--steps 1,5,25,50,100] [--prometheus URL]`

Moves the server's canary through the traffic steps and judges the gates (errors, p95 and p99
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
    @app.command("canary", help="Step a canary's traffic up, judging latency, errors, output "
                 "agreement and the business metric with always-valid statistics; promote "
                 "or roll back.")
    def canary(
        server: Annotated[str, typer.Option("--server", help="http://host:port")],
        release: Annotated[str, typer.Option("--release", help="the server's canary")],
        steps: Annotated[str, typer.Option("--steps", help="traffic percentages")] =
            "1,5,25,50,100",
        prometheus: Annotated[str | None, typer.Option(
            "--prometheus", help="read counts by PromQL from this Prometheus URL")] = None,
        api_key_env: Annotated[str, typer.Option("--api-key-env")] = "INFERTUNE_API_KEY",
        alpha: Annotated[float, typer.Option(
            "--alpha", min=0.0001, max=0.5, help="false-rollback level, whole rollout")] = 0.05,
        min_step_samples: Annotated[int, typer.Option("--min-step-samples", min=1)] = 200,
        baseline_samples: Annotated[int, typer.Option("--baseline-samples", min=1)] = 100,
        poll_s: Annotated[float, typer.Option("--poll-s", min=0.01)] = 1.0,
        step_timeout_s: Annotated[float, typer.Option("--step-timeout-s", min=1)] = 300.0,
        max_disagreement: Annotated[float, typer.Option(
            "--max-disagreement", min=0.0, max=0.99,
            help="largest share of outputs allowed to disagree with the stable's")] = 0.05,
        business_metric: Annotated[str | None, typer.Option("--business-metric")] = None,
        json_out: Annotated[Path | None, typer.Option("--json", help="write the outcome")] =
            None,
    ) -> None:
        import httpx

        from infertune.cli._common import write_json
        from infertune.rollout.client import RouterClient, server_client
        from infertune.rollout.controller import CanaryController, StepPlan
        from infertune.rollout.gates import METHOD, GateConfig, GateResult
        from infertune.rollout.observe import PrometheusMetrics, ServerMetrics

        config = GateConfig(alpha=alpha, min_samples=min(min_step_samples, baseline_samples),
                            max_disagreement=max_disagreement)
        plan = StepPlan(steps=parse_steps(steps), min_step_samples=min_step_samples,
                        baseline_samples=baseline_samples, poll_s=poll_s,
                        step_timeout_s=step_timeout_s, business_metric=business_metric)
        typer.echo(f"canary {release}: steps {', '.join(f'{s:g}%' for s in plan.steps)}; "
                   f"gates judged by {METHOD}; false-rollback level alpha={alpha:g} over the "
                   f"whole rollout ({config.alpha_per_gate:.4g} per gate)", err=True)
        shown: dict[float, int] = {}

        def on_look(weight: float, results: list[GateResult]) -> None:
            shown[weight] = shown.get(weight, 0) + 1

        with server_client(server, api_key_env, os.environ) as client:
            source: Any = ServerMetrics(client)
            if prometheus is not None:
                source = PrometheusMetrics(httpx.Client(base_url=prometheus.rstrip("/"),
                                                        timeout=10))
            controller = CanaryController(RouterClient(client), source, config, plan,
                                          on_look=on_look)
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
