"""`infertune shadow report --server URL [--prometheus URL]` — judge the server's shadow
release against its stable with the canary's always-valid gates (rollout/gates.py): the share
of the shadow's outputs disagreeing with the stable's on the same inputs, its error rate and
its latency tail above the stable's thresholds, over everything mirrored since the server
started. Exit 0 when every gate passes, 1 when one fails, 0 with "wait" when too few rows have
been mirrored to pass (the report says how many). `canary --shadow-gate` runs the same gates
before the canary gets any traffic.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from infertune.cli.canary import _source
from infertune.errors import ConfigError, UserError
from infertune.jsonfile import write_json
from infertune.rollout.analysis import judge_once
from infertune.rollout.client import RouterClient, server_client
from infertune.rollout.gates import SHADOW_GATES, GateConfig

HELP = ("Agreement, errors and latency of the shadow release against the stable, with "
        "always-valid intervals; exit 1 when a gate fails.")

Server = Annotated[str, typer.Option("--server", help="http://host:port")]
Prometheus = Annotated[str | None, typer.Option(
    "--prometheus", help="read counts by PromQL from this Prometheus URL")]
ApiKeyEnv = Annotated[str, typer.Option("--api-key-env")]
Alpha = Annotated[float, typer.Option("--alpha", min=0.0001, max=0.5)]
MaxDisagreement = Annotated[float, typer.Option("--max-disagreement", min=0.0, max=0.99)]
MinSamples = Annotated[int, typer.Option(
    "--min-samples", min=1, help="mirrored rows before a gate may pass")]
JsonOut = Annotated[Path | None, typer.Option("--json")]


@dataclass(frozen=True)
class ShadowOptions:
    """``infertune shadow report --server URL``: the shadow gates' level and sample floor."""

    server: str
    prometheus: str | None = None
    api_key_env: str = "INFERTUNE_API_KEY"
    alpha: float = 0.05
    max_disagreement: float = 0.05
    min_samples: int = 100
    json_out: Path | None = None


def report(server: Server, prometheus: Prometheus = None,
           api_key_env: ApiKeyEnv = "INFERTUNE_API_KEY", alpha: Alpha = 0.05,
           max_disagreement: MaxDisagreement = 0.05, min_samples: MinSamples = 100,
           json_out: JsonOut = None) -> None:
    run(ShadowOptions(server, prometheus, api_key_env, alpha, max_disagreement, min_samples,
                      json_out))


def register(app: typer.Typer) -> None:
    shadow_app = typer.Typer(help="Judge the shadow release's mirrored traffic.",
                             no_args_is_help=True)
    shadow_app.command("report", help=HELP)(report)
    app.add_typer(shadow_app, name="shadow")


def run(options: ShadowOptions) -> None:
    """Judge the server's shadow against its stable; exit 1 (UserError) when a gate fails."""

    config = GateConfig(alpha=options.alpha, gates=SHADOW_GATES,
                        min_samples=options.min_samples,
                        max_disagreement=options.max_disagreement)
    with server_client(options.server, options.api_key_env, os.environ) as client:
        state = RouterClient(client).state()
        if state.shadow is None:
            raise ConfigError(f"{options.server} has no shadow release; serve with --shadow "
                              'NAME or POST /admin/routing {"action": "shadow", "release": '
                              "NAME}")
        snap = _source(client, options.prometheus).snapshot()
    judged = judge_once(snap, state.shadow, state.stable, config, options.min_samples)
    _echo_gates(judged, state.shadow, state.stable, options.alpha)
    if options.json_out is not None:
        write_json(options.json_out, judged.model_dump(mode="json"))
    typer.echo(judged.verdict)
    if judged.verdict == "fail":
        raise UserError(f"shadow {state.shadow} fails its gates: {judged.reason}")


def _echo_gates(judged: Any, shadow: str, stable: str, alpha: float) -> None:
    typer.echo(f"shadow {shadow} against stable {stable}: {judged.verdict} "
               f"({judged.method}; alpha={alpha:g})", err=True)
    for gate in judged.gates:
        typer.echo(f"  {gate['gate']}: {gate['verdict']}, estimate {gate['estimate']:+.4f}"
                   f", interval [{gate['interval'][0]:+.4f}, {gate['interval'][1]:+.4f}], "
                   f"n={gate['n_canary']} shadow", err=True)
