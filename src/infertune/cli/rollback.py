"""`infertune rollback --server URL` — send all traffic back to the previous release now.

With a canary in place its weight drops to 0; after a promotion the previous stable release
answers again. Requests already inside a release finish there, so nothing in flight is lost.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from infertune.rollout.client import RouterClient, server_client


def register(app: typer.Typer) -> None:
    @app.command("rollback", help="Send all traffic back to the previous release at once "
                 "(canary to 0%, or the release before the last promotion).")
    def rollback(
        server: Annotated[str, typer.Option("--server", help="http://host:port of infertune "
                                            "serve --stable ...")],
        reason: Annotated[str, typer.Option("--reason", help="recorded in the event log")] =
            "manual rollback",
        api_key_env: Annotated[str, typer.Option(
            "--api-key-env", help="variable holding the server's API key")] = "INFERTUNE_API_KEY",
    ) -> None:
        with server_client(server, api_key_env, os.environ) as client:
            state = RouterClient(client).change("rollback", reason=reason)
        canary = f", canary {state.canary} at {state.canary_weight:g}%" if state.canary else ""
        typer.echo(f"rolled back: all traffic to {state.stable}{canary}")
