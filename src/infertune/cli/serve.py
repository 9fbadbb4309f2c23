"""`infertune serve MODEL_OR_VARIANT_OR_RUN` — serve a model over HTTP with dynamic batching,
a bounded priority queue, a layered cache and Prometheus metrics.

The flags become one ``ServeCommand`` (``api.ServeOptions`` plus what stays with the command:
the engine, the release router, the alert rules); ``run`` serves it through ``api`` and
cli/serving.py, where the policy's layers, the run-folder rules and the exposure check live.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from infertune.cli._common import quiet_libraries
from infertune.cli.api import ServeOptions, Server, ServeSetup, build_server, prepare_serve
from infertune.cli.export import alert_thresholds_for
from infertune.cli.release import open_registry, serve_releases
from infertune.cli.serving import build_policy, exposure_warnings, policy_layer
from infertune.config import ServePolicy
from infertune.errors import ConfigError
from infertune.serve.alerts import write_rules
from infertune.serve.routing import RoutingState

HELP = ("Serve a model, variant folder or run's recommended variant over HTTP (batching, "
        "priority queue, cache, metrics). Overload protection is on by default: a request with "
        "no timeout_ms (and no --timeout-ms) gets the deadline max(50 ms, max_wait_ms + 3 x the "
        "measured full-batch service time) from entering the queue, shown on /readyz; a "
        "request the queue would make later than its deadline is refused at once with 503, a "
        "full queue answers 429, and every 200 comes within the deadline plus one batch time "
        "(/readyz: answer_bound_ms).")

Model = Annotated[str | None, typer.Argument(help="minilm, a model path, a variant folder, or a "
                                             "run folder with report.json (or --stable NAME)")]
Config = Annotated[Path | None, typer.Option("--config", help="serve.yaml")]
Host = Annotated[str, typer.Option(help="bind address")]
Port = Annotated[int, typer.Option(min=0, max=65535)]
MaxBatchSize = Annotated[int | None, typer.Option("--max-batch-size")]
MaxWaitMs = Annotated[float | None, typer.Option("--max-wait-ms")]
MaxQueue = Annotated[int | None, typer.Option("--max-queue")]
Workers = Annotated[int | None, typer.Option(
    "--workers", help="batches run at once (model threads)")]
RedisUrl = Annotated[str | None, typer.Option("--redis-url")]
FastModel = Annotated[str | None, typer.Option(
    "--fast-model", help="cascade: a fast model answering confident inputs")]
TimeoutMs = Annotated[float | None, typer.Option(
    "--timeout-ms", help="default per-request deadline in ms (replaces the overload bound: "
    "max(50 ms, max_wait_ms + 3 full-batch service times))")]
ApiKeyEnv = Annotated[str | None, typer.Option(
    "--api-key-env", help="environment variable holding the API key; required on a "
    "non-loopback --host, and for admin routes (cache purge)")]
InsecureNoAuth = Annotated[bool, typer.Option(
    "--insecure-no-auth", help="allow a non-loopback --host without an API key (warned at "
    "start and on /readyz)")]
Registry = Annotated[Path | None, typer.Option(
    "--registry", help="release registry folder (for --stable)")]
Stable = Annotated[str | None, typer.Option(
    "--stable", help="serve registry releases: this one answers by default")]
Canary = Annotated[str | None, typer.Option("--canary", help="canary release")]
CanaryWeight = Annotated[float, typer.Option(
    "--canary-weight", min=0, max=100, help="percent of traffic to the canary")]
Shadow = Annotated[str | None, typer.Option(
    "--shadow", help="release getting a mirrored copy of stable traffic")]
Engine = Annotated[str, typer.Option(
    "--engine", help="local: one uvicorn process; ray: a Ray Serve application whose replicas "
    "autoscale on queue length (needs the ray extra)")]
RayAddress = Annotated[str | None, typer.Option(
    "--ray-address", help="with --engine ray: join this Ray cluster (e.g. ray://head:10001 or "
    "auto) instead of starting a local one-node Ray")]
MinReplicas = Annotated[int | None, typer.Option(
    "--min-replicas", min=1, help="with --engine ray: keep at least this many replicas warm, "
    "over the warm pool derived from the run's traffic")]
KeepCoresAwake = Annotated[bool, typer.Option(
    "--keep-cores-awake", help="spin an idle-priority process on each core so none halts "
    "between requests: on a VM a halted core wakes late, which adds to latency (Linux; the "
    "cores show busy; serve.yaml: keep_cores_awake)")]
AlertsOut = Annotated[Path | None, typer.Option(
    "--alerts-out", help="write Prometheus alert rules with thresholds from the run's SLO (and "
    "the served policy) to this file")]


@dataclass(frozen=True)
class Releases:
    """``--registry DIR --stable NAME [--canary NAME --canary-weight PCT] [--shadow NAME]``."""

    registry: Path | None
    stable: str
    canary: str | None = None
    canary_weight: float = 0.0
    shadow: str | None = None


@dataclass(frozen=True)
class ServeCommand:
    """``infertune serve``'s options, checked when built. ``policy`` is the flags' layer (the
    fields they set); ``releases`` serves registry releases instead of ``model``."""

    model: str | None
    policy: ServePolicy
    host: str = "127.0.0.1"
    port: int = 8000
    config: Path | None = None
    fast_model: str | None = None
    insecure_no_auth: bool = False
    engine: str = "local"  # local or ray
    ray_address: str | None = None
    min_replicas: int | None = None
    alerts_out: Path | None = None
    releases: Releases | None = None

    def __post_init__(self) -> None:
        if self.engine not in ("local", "ray"):
            raise ConfigError(f"--engine must be local or ray, got {self.engine!r}")
        if self.ray_address is not None and self.engine != "ray":
            raise ConfigError("--ray-address needs --engine ray")
        if self.min_replicas is not None and self.engine != "ray":
            raise ConfigError("--min-replicas needs --engine ray (the local engine is one "
                              "process)")
        if self.releases is None and self.model is None:
            raise ConfigError("name what to serve: a model, variant or run folder, or "
                              "--registry DIR --stable NAME")

    def serve_options(self, target: str) -> ServeOptions:
        return ServeOptions(target, host=self.host, port=self.port, policy=self.policy,
                            config=self.config, fast_model=self.fast_model,
                            insecure_no_auth=self.insecure_no_auth)


def serve(model: Model = None, config: Config = None, host: Host = "127.0.0.1",
          port: Port = 8000, max_batch_size: MaxBatchSize = None, max_wait_ms: MaxWaitMs = None,
          max_queue: MaxQueue = None, workers: Workers = None, redis_url: RedisUrl = None,
          fast_model: FastModel = None, timeout_ms: TimeoutMs = None,
          api_key_env: ApiKeyEnv = None, insecure_no_auth: InsecureNoAuth = False,
          registry: Registry = None, stable: Stable = None, canary: Canary = None,
          canary_weight: CanaryWeight = 0.0, shadow: Shadow = None, engine: Engine = "local",
          ray_address: RayAddress = None, min_replicas: MinReplicas = None,
          keep_cores_awake: KeepCoresAwake = False, alerts_out: AlertsOut = None) -> None:
    releases = None if stable is None else Releases(registry, stable, canary, canary_weight,
                                                    shadow)
    policy = policy_layer({
        "max_batch_size": max_batch_size, "max_wait_ms": max_wait_ms, "max_queue": max_queue,
        "workers": workers, "redis_url": redis_url, "timeout_ms": timeout_ms,
        "api_key_env": api_key_env, "keep_cores_awake": keep_cores_awake or None})
    run(ServeCommand(model, policy, host=host, port=port, config=config,
                     fast_model=fast_model, insecure_no_auth=insecure_no_auth,
                     engine=engine, ray_address=ray_address, min_replicas=min_replicas,
                     alerts_out=alerts_out, releases=releases))


def run(command: ServeCommand) -> None:
    """Serve until SIGTERM/SIGINT: registry releases behind the router, or one target on the
    local engine or on Ray."""
    if command.releases is not None:  # several registry releases behind the router (issue 15)
        _serve_releases(command, command.releases)
        return
    assert command.model is not None  # ServeCommand requires one without releases
    setup = prepare_serve(command.serve_options(command.model))
    if command.alerts_out is not None:  # the generator and inputs `infertune export` uses

        write_rules(command.alerts_out, alert_thresholds_for(command.model, setup.policy))
        _echo(f"alert rules (thresholds from the SLO) written to {command.alerts_out}")
    if command.engine == "ray":
        _serve_on_ray(command, setup)
        return
    server = build_server(setup)
    _echo_start(server)
    server.run()


def _serve_on_ray(command: ServeCommand, setup: ServeSetup) -> None:
    from infertune.serve.engines.ray_engine import serve_on_ray  # the optional extra

    assert command.model is not None
    quiet_libraries()
    serve_on_ray(command.model, setup.model_ref, setup.policy, fast_model_ref=command.fast_model,
                 host=command.host, port=command.port, address=command.ray_address,
                 warnings=setup.warnings, min_replicas=command.min_replicas, echo=_echo)


def _serve_releases(command: ServeCommand, releases: Releases) -> None:
    state = RoutingState(stable=releases.stable, canary=releases.canary,
                         canary_weight=releases.canary_weight, shadow=releases.shadow)

    def policy_for(recorded: ServePolicy) -> ServePolicy:
        return build_policy(policy_layer(recorded.model_dump(exclude_defaults=True)),
                            command.config, command.policy)

    def check_exposure(policy: ServePolicy) -> list[str]:
        return exposure_warnings(command.host, policy, command.insecure_no_auth)

    if command.engine == "ray":  # the routing state shared by every replica
        from infertune.rollout.ray_router import serve_releases_on_ray  # the ray extra

        reg = open_registry(releases.registry)
        for warning in check_exposure(policy_for(reg.get(releases.stable).record.policy)):
            _echo(f"WARNING: {warning}")
        quiet_libraries()
        serve_releases_on_ray(reg.root, state, policy_for, host=command.host,
                              port=command.port, address=command.ray_address,
                              min_replicas=command.min_replicas, echo=_echo)
        return
    serve_releases(releases.registry, state, host=command.host, port=command.port,
                   policy_for=policy_for, check_exposure=check_exposure)


def _echo_start(server: Server) -> None:
    """The start line (what is served, where, with which knobs) and each warning."""
    policy, info = server.policy, server.model
    assert info is not None  # build_server records the model it loaded
    kind = "processes" if server.worker_processes else "threads"
    shown = f", {server.model_threads} model thread(s) per worker" if server.model_threads else ""
    shown += ", cores kept awake" if policy.keep_cores_awake else ""
    _echo(f"serving {info.id} ({info.version}) on http://{server.host}:{server.port} "
          f"— batch<={policy.max_batch_size}, wait<={policy.max_wait_ms} ms, "
          f"queue<={policy.max_queue}, workers={policy.workers} ({kind}){shown}; "
          "/readyz turns 200 after warm-up")
    for warning in server.warnings:
        _echo(f"WARNING: {warning}")


def _echo(line: str) -> None:
    typer.echo(line, err=True)


def register(app: typer.Typer) -> None:
    app.command("serve", help=HELP)(serve)
