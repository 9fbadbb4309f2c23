"""`infertune ab report [--server URL | --registry DIR]` — a binary business metric per arm with
its always-valid interval, the fixed-horizon sample size for a minimum detectable effect, and
a decision (see rollout/ab.py for the statistics)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

import typer

from infertune.cli.release import open_registry
from infertune.errors import ConfigError
from infertune.rollout.ab import ab_report
from infertune.rollout.client import RouterClient, server_client
from infertune.rollout.observe import ServerMetrics
from infertune.rollout.stats import Counts

HELP = ("The business metric per arm, the difference with its always-valid interval, the "
        "sample size for --mde, and a decision.")

ServerUrl = Annotated[str | None, typer.Option("--server", help="read a live server")]
Registry = Annotated[Path | None, typer.Option(
    "--registry", help="read the feedback stored in this registry")]
RedisUrl = Annotated[str | None, typer.Option(
    "--redis", help="read the feedback replicas stored in this Redis")]
Metric = Annotated[str | None, typer.Option("--metric")]
Control = Annotated[str | None, typer.Option("--control", help="default: stable")]
Treatment = Annotated[str | None, typer.Option("--treatment", help="default: the canary")]
Alpha = Annotated[float, typer.Option("--alpha", min=0.0001, max=0.5)]
Mde = Annotated[float, typer.Option("--mde", help="minimum detectable effect, absolute rate")]
Power = Annotated[float, typer.Option("--power", min=0.5, max=0.999)]
ApiKeyEnv = Annotated[str, typer.Option("--api-key-env")]
AsJson = Annotated[bool, typer.Option("--json")]


@dataclass(frozen=True)
class AbOptions:
    """``infertune ab report``: the feedback from exactly one of a live server, a registry or
    Redis; the metric and arms default to what that source holds."""

    server: str | None = None
    registry: Path | None = None
    redis_url: str | None = None
    metric: str | None = None
    control: str | None = None
    treatment: str | None = None
    alpha: float = 0.05
    mde: float = 0.01
    power: float = 0.8
    api_key_env: str = "INFERTUNE_API_KEY"

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.server, self.registry, self.redis_url)) != 1:
            raise ConfigError("pass exactly one of --server URL, --registry DIR or --redis URL")


def report(server: ServerUrl = None, registry: Registry = None, redis_url: RedisUrl = None,
           metric: Metric = None, control: Control = None, treatment: Treatment = None,
           alpha: Alpha = 0.05, mde: Mde = 0.01, power: Power = 0.8,
           api_key_env: ApiKeyEnv = "INFERTUNE_API_KEY", as_json: AsJson = False) -> None:
    run(AbOptions(server, registry, redis_url, metric, control, treatment, alpha, mde, power,
                  api_key_env), as_json=as_json)


def register(app: typer.Typer) -> None:
    ab_app = typer.Typer(help="A/B analysis of business feedback.", no_args_is_help=True)
    ab_app.command("report", help=HELP)(report)
    app.add_typer(ab_app, name="ab")


def run(options: AbOptions, *, as_json: bool = False) -> None:
    options, counts = _server_counts(options) if options.server is not None else \
        _stored_counts(options)
    if options.metric is None:
        raise ConfigError("no feedback recorded yet; POST /v1/feedback {\"request_id\": ..., "
                          "\"metric\": \"conversion\", \"value\": 1}")
    if options.control is None or options.treatment is None:
        raise ConfigError("name the arms: --control RELEASE --treatment RELEASE")
    result = ab_report(counts, options.metric, options.control, options.treatment,
                       alpha=options.alpha, mde=options.mde, power=options.power)
    typer.echo(json.dumps(result.to_dict(), indent=2) if as_json else result.sentence())


def _server_counts(options: AbOptions) -> tuple[AbOptions, dict[str, Counts]]:
    """A live server's counts; the arms default to its stable and canary (or the previous
    stable), the metric to the first it has feedback for."""

    assert options.server is not None
    with server_client(options.server, options.api_key_env, os.environ) as client:
        state = RouterClient(client).state()
        snap = ServerMetrics(client).snapshot()
    metrics = sorted({m for rc in snap.releases.values() for m in rc.feedback})
    metric = options.metric or (metrics[0] if metrics else None)
    counts = {name: rc.feedback[metric] for name, rc in snap.releases.items()
              if metric is not None and metric in rc.feedback}
    return replace(options, metric=metric, control=options.control or state.stable,
                   treatment=options.treatment or state.canary or state.previous_stable), counts


def _stored_counts(options: AbOptions) -> tuple[AbOptions, dict[str, Counts]]:
    """The counts stored in Redis or the registry; the metric defaults to the first stored."""
    from infertune.rollout.feedback import FeedbackStore, RedisFeedback  # redis: cli/__init__

    store = (RedisFeedback(options.redis_url) if options.redis_url is not None
             else FeedbackStore(open_registry(options.registry)))
    metric = options.metric or next(iter(store.metrics()), None)
    return replace(options, metric=metric), store.counts(metric) if metric else {}
