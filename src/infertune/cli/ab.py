"""`infertune ab report [--server URL | --registry DIR]` — a binary business metric per arm with
its always-valid interval, the fixed-horizon sample size for a minimum detectable effect, and
a decision (see rollout/ab.py for the statistics)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

from infertune.errors import ConfigError


def register(app: typer.Typer) -> None:
    ab_app = typer.Typer(help="A/B analysis of business feedback.", no_args_is_help=True)

    @ab_app.command("report", help="The business metric per arm, the difference with its "
                    "always-valid interval, the sample size for --mde, and a decision.")
    def report(
        server: Annotated[str | None, typer.Option("--server", help="read a live server")] =
            None,
        registry: Annotated[Path | None, typer.Option(
            "--registry", help="read the feedback stored in this registry")] = None,
        redis_url: Annotated[str | None, typer.Option(
            "--redis", help="read the feedback replicas stored in this Redis")] = None,
        metric: Annotated[str | None, typer.Option("--metric")] = None,
        control: Annotated[str | None, typer.Option("--control", help="default: stable")] =
            None,
        treatment: Annotated[str | None, typer.Option(
            "--treatment", help="default: the canary")] = None,
        alpha: Annotated[float, typer.Option("--alpha", min=0.0001, max=0.5)] = 0.05,
        mde: Annotated[float, typer.Option(
            "--mde", help="minimum detectable effect, absolute rate")] = 0.01,
        power: Annotated[float, typer.Option("--power", min=0.5, max=0.999)] = 0.8,
        api_key_env: Annotated[str, typer.Option("--api-key-env")] = "INFERTUNE_API_KEY",
        as_json: Annotated[bool, typer.Option("--json")] = False,
    ) -> None:
        from infertune.rollout.ab import ab_report
        from infertune.rollout.stats import Counts

        if sum(x is not None for x in (server, registry, redis_url)) != 1:
            raise ConfigError("pass exactly one of --server URL, --registry DIR or --redis URL")
        counts: dict[str, Counts]
        if server is not None:
            from infertune.rollout.client import RouterClient, server_client
            from infertune.rollout.observe import ServerMetrics

            with server_client(server, api_key_env, os.environ) as client:
                state = RouterClient(client).state()
                snap = ServerMetrics(client).snapshot()
            control = control or state.stable
            treatment = treatment or state.canary or state.previous_stable
            metrics = sorted({m for rc in snap.releases.values() for m in rc.feedback})
            metric = metric or (metrics[0] if metrics else None)
            counts = {name: rc.feedback[metric] for name, rc in snap.releases.items()
                      if metric is not None and metric in rc.feedback}
        else:
            from infertune.cli.release import open_registry
            from infertune.rollout.feedback import FeedbackStore, RedisFeedback

            store = (RedisFeedback(redis_url) if redis_url is not None
                     else FeedbackStore(open_registry(registry)))
            metric = metric or next(iter(store.metrics()), None)
            counts = store.counts(metric) if metric else {}
        if metric is None:
            raise ConfigError("no feedback recorded yet; POST /v1/feedback {\"request_id\": ..., "
                              "\"metric\": \"conversion\", \"value\": 1}")
        if control is None or treatment is None:
            raise ConfigError("name the arms: --control RELEASE --treatment RELEASE")
        result = ab_report(counts, metric, control, treatment, alpha=alpha, mde=mde,
                           power=power)
        typer.echo(json.dumps(result.to_dict(), indent=2) if as_json else result.sentence())

    app.add_typer(ab_app, name="ab")
