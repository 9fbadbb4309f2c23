"""`infertune serve --engine ray`: the serving runtime as a Ray Serve application that scales
its replicas on queue length, with settings derived from measurements.

    engine = RayEngine(ModelApp(ref, policy), RayOptions(address=None), run=read_run(dir))
    plan = engine.start()     # Ray up, one replica measured, the derived autoscaling applied
    engine.serve_until_signal()   # SIGTERM/SIGINT: Serve drains and stops, embedded Ray too

Start-up, in order: (1) join ``--ray-address`` or start a local single-node Ray (the embedded
default, with short autoscaling metric pushes; see EMBEDDED_PUSH_INTERVAL_S); (2) deploy one
replica and time it from deploy to healthy (healthy = warmed up: the replica's cold start on
this cluster); (3) time whole requests per batch size on that replica; (4) derive the plan
(autoscale.derive_plan) from those measurements and the run's scenario, print and save it;
(5) apply it to the running deployment: the autoscaling config, and the bound on Ray's router
queue (max_queued_requests, whose excess Ray answers 503 with Retry-After at once).

Stopping (SIGTERM/SIGINT): every replica first refuses new predictions (503, as a local engine
that is shutting down) and answers the ones it accepted (``InfertuneReplica.drain``); only then
does Serve go, since Serve's own shutdown kills its HTTP proxy at once, cutting every request
still in flight through it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any, TypedDict

import ray
from ray import serve
from ray.serve.config import BackpressureConfig

from infertune.artifacts import RunDir
from infertune.config import ServePolicy
from infertune.errors import ConfigError, InternalError
from infertune.hardware import detect
from infertune.jsonfile import write_json
from infertune.serial import Serial
from infertune.serve.engines.autoscale import (
    RAY_PUSH_INTERVAL_S,
    AutoscalePlan,
    Demand,
    Limits,
    RayAutoscaling,
    RayDeploymentOptions,
    ReplicaFacts,
    derive_plan,
)
from infertune.serve.engines.replica import InfertuneReplica, ModelApp, ReplicaApp
from infertune.serve.engines.run_facts import RunFacts, Sourced, read_run
from infertune.serve.engines.shed_policy import POLICY_PATH

# One node: a push is a small local RPC, so twice a second costs nothing measurable and lets
# the autoscaler see a queue within a second instead of Ray's default 10 s.
EMBEDDED_PUSH_INTERVAL_S = 0.5
PUSH_ENV = ("RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S",
            "RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S")
DEPLOYMENT = "infertune"
MEASURE_REPEATS = 5
MEASURE_SECONDS = 0.3  # per batch size
DRAIN_MARGIN_S = 5.0  # on top of the replicas' own drain bound: the broadcast's round trips
log = logging.getLogger("infertune.serve.engines.ray")


@dataclass(frozen=True)
class RayOptions:
    address: str | None = None  # None: start a local single-node Ray and stop it on exit
    host: str = "127.0.0.1"
    port: int = 8000
    app_name: str = "infertune"
    cpus_per_replica: float = 1.0
    plan_path: Path = field(default_factory=lambda: Path("ray_autoscaling.json"))
    min_replicas: int | None = None  # --min-replicas: a warm pool pinned over the derived one

    def __post_init__(self) -> None:
        if not self.cpus_per_replica > 0:
            raise ConfigError(f"cpus_per_replica must be > 0, got {self.cpus_per_replica}")
        if self.min_replicas is not None and self.min_replicas < 1:
            raise ConfigError(f"--min-replicas must be >= 1, got {self.min_replicas}")

    @property
    def embedded(self) -> bool:
        return self.address is None


@dataclass
class Measured(Serial):
    cold_start_s: float
    service_ms: dict[int, float]
    cluster_cpus: float
    nodes: int = 1  # alive nodes: each runs one of Ray's HTTP proxies


@dataclass(kw_only=True)
class PlanFile(Serial):
    """ray_autoscaling.json: what start() measured and the plan it applied."""

    schema: str = "infertune.ray_autoscaling/v1"
    app: str  # ReplicaApp.describe()
    ray_address: str  # --ray-address, or "embedded one-node Ray"
    cluster_address: str | None  # where a second driver joins (`ray.init(address=...)`)
    measured: Measured
    autoscaling_policy: str = POLICY_PATH
    plan: AutoscalePlan


class ProbeAutoscaling(TypedDict):
    """The probe's fixed single replica."""

    min_replicas: int
    max_replicas: int
    initial_replicas: int


class AppliedAutoscaling(RayAutoscaling):
    """The plan's autoscaling_config with infertune's policy function."""

    policy: dict[str, str]


class RayEngine:
    def __init__(self, app: ReplicaApp, policy: ServePolicy, options: RayOptions,
                 run: RunFacts | None = None, echo: Callable[[str], None] = print, *,
                 on_connect: Callable[[], object] | None = None) -> None:
        """``on_connect`` runs once Ray is up, before any replica (e.g. to start the routing
        owner replicas need); what it returns is kept for as long as the engine runs."""
        self.app = app
        self.on_connect = on_connect
        self.kept: object = None
        self.policy = policy
        self.options = options
        self.run = run or RunFacts()
        self.echo = echo
        self.plan: AutoscalePlan | None = None
        self.measured: Measured | None = None
        self._started_ray = False

    def start(self) -> AutoscalePlan:
        self._connect()
        if self.on_connect is not None:
            self.kept = self.on_connect()
        serve.start(http_options={"host": self.options.host, "port": self.options.port})
        self.measured = self._measure()
        plan = self.derive()
        self.plan = plan
        self._save(plan, self.measured)
        for line in plan.lines():
            self.echo(line)
        self.echo(f"autoscaling policy = {POLICY_PATH}: Ray's queue-length rule (ongoing / "
                  "target), raised to n / (1 - r) while the n replicas refuse a share r of the "
                  "requests reaching them (an overload that is shed does not grow the queue)")
        pinned = self.options.min_replicas
        if pinned is not None:
            self.echo(f"min_replicas = {pinned} replicas: pinned by --min-replicas (derived: "
                      f"{plan.min_replicas.value:g})")
        self.apply(plan, min_replicas=pinned)
        return plan

    def derive(self, *, goodput: Sourced | None = None,
               demand: Demand | None = None) -> AutoscalePlan:
        """The plan from what start() measured and the run's facts; ``goodput`` and ``demand``
        replace the run's (a benchmark that measured a replica's goodput at its own SLO)."""
        measured = self.measured
        if measured is None:
            raise InternalError("RayEngine.derive() before start() measured a replica")
        if self.options.embedded:
            push = float(os.environ[PUSH_ENV[0]])
            push_source = (f"{PUSH_ENV[0]} of the embedded one-node Ray"
                           if push != EMBEDDED_PUSH_INTERVAL_S else
                           "set by infertune for its embedded one-node Ray")
        else:
            push = RAY_PUSH_INTERVAL_S
            push_source = "Ray's default; a joined cluster may set its own"
        good = goodput or self.run.goodput
        return derive_plan(
            ReplicaFacts(
                service_ms=measured.service_ms,
                service_source=("measured on the first replica: p50 of whole requests "
                                "(preprocess + forward + postprocess)"),
                cold_start_s=measured.cold_start_s,
                cold_start_source="measured: first replica, deploy to warmed up on this cluster",
                max_batch_size=self.policy.max_batch_size, max_wait_ms=self.policy.max_wait_ms,
                goodput_rps=good.value if good else None,
                goodput_source=good.source if good else "",
                inputs_per_request=self.run.inputs_per_request,
                timeout_ms=self.policy.timeout_ms),
            demand or self.run.demand,
            self.run.limits(Limits(cpus_per_replica=self.options.cpus_per_replica,
                                   cluster_cpus=measured.cluster_cpus,
                                   proxies=max(1, measured.nodes))),
            push_interval_s=push, push_source=push_source)

    def _connect(self) -> None:
        if self.options.embedded:
            for name in PUSH_ENV:  # read by Serve's processes, which inherit this environment
                os.environ.setdefault(name, str(EMBEDDED_PUSH_INTERVAL_S))
            cores = detect(with_gpus=False).effective_cores
            with _keeping_signal_handlers():
                ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False,
                         configure_logging=False)
            self._started_ray = True
            return
        try:
            with _keeping_signal_handlers():
                ray.init(address=self.options.address, log_to_driver=False)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise ConfigError(f"cannot join the Ray cluster at {self.options.address!r} ({exc}); "
                              "start one with `ray start --head` or leave out --ray-address to "
                              "run a local one (a cluster with token authentication, Ray's "
                              "default, needs RAY_AUTH_MODE=token and its token in this "
                              "environment: Ray sends it to no explicit address otherwise)"
                              ) from exc

    def _deployment(self, autoscaling: ProbeAutoscaling | AppliedAutoscaling,
                    options: RayDeploymentOptions | None = None) -> Any:
        """The deployment with ``options`` (the plan's); without them (the probe, which no
        HTTP request reaches) one replica holding the policy's queue."""
        # Ray's ray_actor_options and serve.deployment's keyword arguments are untyped
        # mappings in Ray's own API (values of several types), so these two stay dicts
        actor: dict[str, Any] = {"num_cpus": self.options.cpus_per_replica}
        key_env = self.policy.api_key_env
        if key_env and key_env in os.environ:
            # replicas on other nodes do not see this shell's environment
            actor["runtime_env"] = {"env_vars": {key_env: os.environ[key_env]}}
        extra: dict[str, Any] = {"max_ongoing_requests": self.policy.max_queue}
        if options is not None:
            extra = {
                "max_ongoing_requests": options["max_ongoing_requests"],
                "max_queued_requests": options["max_queued_requests"],
                "backpressure_config": BackpressureConfig(
                    status_code=503, retry_after_s=options["backpressure_retry_after_s"]),
                "graceful_shutdown_timeout_s": options["graceful_shutdown_timeout_s"]}
        return serve.deployment(
            InfertuneReplica, name=DEPLOYMENT, ray_actor_options=actor,
            autoscaling_config=autoscaling, health_check_period_s=2.0, **extra)

    def _measure(self) -> Measured:
        """Deploy one probe replica with no HTTP route (so no request disturbs the timing),
        time it from deploy to healthy, time requests per batch size on it, remove it.
        Ray Serve gives every deploy a new code version, so the real deployment starts fresh
        replicas either way; a probe costs no more than reconfiguring a measured one."""
        one = ProbeAutoscaling(min_replicas=1, max_replicas=1, initial_replicas=1)
        probe = f"{self.options.app_name}-probe"
        started = time.monotonic()
        handle = serve.run(self._deployment(one).bind(self.app),
                           name=probe, route_prefix=None)
        cold = time.monotonic() - started
        sizes = sorted({b for b in (1, 2, 4, 8, 16, 32, 64) if b <= self.policy.max_batch_size}
                       | {self.policy.max_batch_size})
        try:
            service = handle.service_times.remote(sizes, MEASURE_REPEATS,
                                                  MEASURE_SECONDS).result()
        finally:
            serve.delete(probe)
        cpus = float(ray.cluster_resources().get("CPU", 0.0))
        nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
        return Measured(cold_start_s=cold, service_ms={int(k): float(v) for k, v in
                                                       service.items()}, cluster_cpus=cpus,
                        nodes=nodes)

    def apply(self, plan: AutoscalePlan, *, min_replicas: int | None = None,
              max_replicas: int | None = None) -> None:
        """Deploy with ``plan``'s settings (the replica bounds overridden, e.g. by a benchmark
        pinning a count); returns once the deployment's replicas are healthy."""
        derived = plan.ray_autoscaling()
        # queue length, raised while shedding
        config: AppliedAutoscaling = {**derived, "policy": {"policy_function": POLICY_PATH}}
        if min_replicas is not None:
            config["min_replicas"] = config["initial_replicas"] = min_replicas
            config["max_replicas"] = max(min_replicas, derived["max_replicas"])
        if max_replicas is not None:
            config["max_replicas"] = max_replicas
        serve.run(self._deployment(config, plan.ray_deployment()).bind(self._replica_app(plan)),
                  name=self.options.app_name, route_prefix="/")

    def _replica_app(self, plan: AutoscalePlan) -> ReplicaApp:
        """One model serves with the plan's replica deadline (the deadline less the router's
        wait, which a replica cannot see); the release router keeps each release's policy."""
        if not isinstance(self.app, ModelApp):
            return self.app
        timeout_ms = round(plan.replica_deadline_s.value * 1000, 3)
        return replace(self.app, policy=self.app.policy.model_copy(
            update={"timeout_ms": timeout_ms}))

    def running_replicas(self) -> int:
        """Replicas Ray Serve reports RUNNING for this app (from the driver, not over HTTP)."""
        app = serve.status().applications.get(self.options.app_name)
        if app is None or DEPLOYMENT not in app.deployments:
            return 0
        states = app.deployments[DEPLOYMENT].replica_states
        return int(sum(n for state, n in states.items() if str(state).endswith("RUNNING")))

    def _save(self, plan: AutoscalePlan, measured: Measured) -> None:
        saved = PlanFile(app=self.app.describe(),
                         ray_address=self.options.address or "embedded one-node Ray",
                         cluster_address=ray.get_runtime_context().gcs_address,
                         measured=measured, plan=plan)
        path = write_json(self.options.plan_path, saved.to_dict())
        self.echo(f"autoscaling plan saved to {path}")

    def drain(self) -> list[int]:
        """Every replica refuses new predictions and answers the ones it accepted, within the
        plan's graceful_shutdown_timeout_s; returns what each left unanswered (all 0: drained).
        Nothing to drain before the plan is applied."""
        if self.plan is None or not ray.is_initialized():
            return []
        bound = self.plan.graceful_shutdown_timeout_s.value
        handle = serve.get_deployment_handle(DEPLOYMENT, self.options.app_name)
        results = handle.broadcast("drain", bound).results(
            timeout_s=bound + DRAIN_MARGIN_S, return_exceptions=True)
        left = [r for r in results if isinstance(r, int)]
        failed = [r for r in results if not isinstance(r, int)]
        if failed or any(left):
            log.warning("drain: %d replica(s) failed to drain (%s), %d request(s) unanswered "
                        "after %g s", len(failed), failed[:1], sum(left), bound)
        return left

    def stop(self) -> None:
        """Drain the replicas (each answers what it accepted, new requests get 503), then stop
        Serve; the embedded Ray goes with it, a joined cluster keeps running without this
        app."""
        try:
            try:
                self.drain()
            except Exception:  # noqa: BLE001 - a failed drain must not keep Ray running
                log.warning("drain failed; stopping Serve anyway", exc_info=True)
            if self._started_ray:
                serve.shutdown()
            elif ray.is_initialized():
                serve.delete(self.options.app_name)
        finally:
            if ray.is_initialized():
                ray.shutdown()

    def serve_until_signal(self, stop: threading.Event) -> None:
        """Wait for ``stop`` (set by SIGTERM/SIGINT), then stop; fails if Ray goes away."""
        try:
            while not stop.wait(1.0):
                if not ray.is_initialized():
                    raise InternalError("the Ray cluster went away; see the Ray logs in "
                                        "/tmp/ray/session_latest/logs")
        finally:
            self.stop()


@contextlib.contextmanager
def _keeping_signal_handlers() -> Iterator[None]:
    """ray.init installs a native SIGTERM handler that aborts the driver, which would leave an
    embedded Ray's processes running; put the Python handlers back so SIGTERM stops it."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            if handler is not None:
                signal.signal(sig, handler)


class StopOnSignal:
    """SIGTERM/SIGINT handler: sets ``event``; while start-up runs it also interrupts it
    (KeyboardInterrupt) so the caller stops the half-started Ray instead of leaving it."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.serving = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.event.set()
        if not self.serving:
            raise KeyboardInterrupt(f"signal {signum} during start-up")

def serve_on_ray(target: str, model_ref: str, policy: ServePolicy, *,
                 fast_model_ref: str | None = None, host: str = "127.0.0.1", port: int = 8000,
                 address: str | None = None, warnings: tuple[str, ...] = (),
                 min_replicas: int | None = None, echo: Callable[[str], None] = print) -> None:
    """What `infertune serve TARGET --engine ray` runs: ``target`` is the command's argument
    (a run folder lends its scenario and measurements to the plan, which is saved there as
    ray_autoscaling.json; otherwise in the working directory)."""
    run_dir = Path(target)
    is_run = RunDir(run_dir).exists_run()
    cpus = float(policy.model_threads or 1)
    app = ModelApp(model_ref, policy, fast_model_ref, model_threads=max(1, int(cpus)),
                   warnings=warnings)
    options = RayOptions(address=address, host=host, port=port, cpus_per_replica=cpus,
                         plan_path=(run_dir if is_run else Path.cwd()) / "ray_autoscaling.json",
                         min_replicas=min_replicas)
    engine = RayEngine(app, policy, options, read_run(run_dir) if is_run else None, echo)
    serve_engine(engine, f"serving {model_ref} on http://{host}:{port} through Ray Serve")


def serve_engine(engine: RayEngine, serving: str) -> None:
    """Start ``engine`` (stopping it again if start-up fails or is interrupted), then serve
    until SIGTERM/SIGINT; ``serving`` opens the line printed once it takes traffic."""
    echo = engine.echo
    where = engine.options.address or "a local one-node Ray (stopped on exit)"
    echo(f"starting Ray Serve on {where}; measuring one replica before applying the plan")
    handler = StopOnSignal()
    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            engine.start()
        except BaseException:
            engine.stop()
            raise
        handler.serving = True
        echo(f"{serving} — replicas take traffic once warmed up; SIGTERM drains and stops")
        engine.serve_until_signal(handler.event)
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
