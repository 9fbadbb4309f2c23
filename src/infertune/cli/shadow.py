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
from pathlib import Path
from typing import Annotated

import typer

from infertune.errors import ConfigError, UserError


def register(app: typer.Typer) -> None:
    shadow_app = typer.Typer(help="Judge the shadow release's mirrored traffic.",
                             no_args_is_help=True)

    @shadow_app.command("report", help="Agreement, errors and latency of the shadow release "
                        "against the stable, with always-valid intervals; exit 1 when a gate "
                        "fails.")
    def report(
        server: Annotated[str, typer.Option("--server", help="http://host:port")],
        prometheus: Annotated[str | None, typer.Option(
            "--prometheus", help="read counts by PromQL from this Prometheus URL")] = None,
        api_key_env: Annotated[str, typer.Option("--api-key-env")] = "INFERTUNE_API_KEY",
        alpha: Annotated[float, typer.Option("--alpha", min=0.0001, max=0.5)] = 0.05,
        max_disagreement: Annotated[float, typer.Option(
            "--max-disagreement", min=0.0, max=0.99)] = 0.05,
        min_samples: Annotated[int, typer.Option(
            "--min-samples", min=1, help="mirrored rows before a gate may pass")] = 100,
        json_out: Annotated[Path | None, typer.Option("--json")] = None,
    ) -> None:
        from infertune.cli.canary import _source
        from infertune.jsonfile import write_json
        from infertune.rollout.analysis import judge_once
        from infertune.rollout.client import RouterClient, server_client
        from infertune.rollout.gates import SHADOW_GATES, GateConfig

        config = GateConfig(alpha=alpha, gates=SHADOW_GATES, min_samples=min_samples,
                            max_disagreement=max_disagreement)
        with server_client(server, api_key_env, os.environ) as client:
            state = RouterClient(client).state()
            if state.shadow is None:
                raise ConfigError(f"{server} has no shadow release; serve with --shadow NAME "
                                  'or POST /admin/routing {"action": "shadow", "release": NAME}')
            snap = _source(client, prometheus).snapshot()
        judged = judge_once(snap, state.shadow, state.stable, config, min_samples)
        typer.echo(f"shadow {state.shadow} against stable {state.stable}: {judged.verdict} "
                   f"({judged.method}; alpha={alpha:g})", err=True)
        for gate in judged.gates:
            typer.echo(f"  {gate['gate']}: {gate['verdict']}, estimate {gate['estimate']:+.4f}"
                       f", interval [{gate['interval'][0]:+.4f}, {gate['interval'][1]:+.4f}], "
                       f"n={gate['n_canary']} shadow", err=True)
        if json_out is not None:
            write_json(json_out, judged.model_dump(mode="json"))
        typer.echo(judged.verdict)
        if judged.verdict == "fail":
            raise UserError(f"shadow {state.shadow} fails its gates: {judged.reason}")

    app.add_typer(shadow_app, name="shadow")
