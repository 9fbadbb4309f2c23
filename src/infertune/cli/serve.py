"""`infertune serve MODEL_OR_VARIANT_OR_RUN` — serve a model over HTTP with dynamic batching,
a bounded priority queue, a layered cache and Prometheus metrics.

Policy precedence (later wins): ServePolicy defaults < a run's report.json ``serving.policy``
< ``--config serve.yaml`` < command-line flags.

Given a run directory (a folder with report.json), it serves the recommended variant. Keys
read from report.json:
  report["recommendation"]["variant_id"]   folder name under <run>/variants/
  report["serving"]["policy"]              a ServePolicy dict (optional)
When that policy sets no timeout_ms, the deadline defaults to ten times the loosest latency
target of the run's scenario.yaml SLO (config.client_deadline_ms: it protects callers from
answers too late to use; the SLO is judged on the answers).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError

from infertune.config import ServePolicy, client_deadline_ms
from infertune.errors import ConfigError
from infertune.hardware import HardwareInfo, detect, int8_saturation_risk
from infertune.jsonfile import read_json
from infertune.models.variant import read_manifest
from infertune.serve.worker_threads import fit_to_workers, threads_per_worker


def resolve_target(ref: str) -> tuple[str, dict[str, Any]]:
    """(model reference, policy dict from a run's report) for a model, variant or run folder."""
    path = Path(ref)
    report_path = path / "report.json"
    if not (path.is_dir() and report_path.is_file()):
        return ref, {}
    report = read_json(report_path, fix="rerun infertune optimize, or serve a variant folder "
                       f"directly (infertune serve {path}/variants/<id>)")
    try:
        variant_id = report["recommendation"]["variant_id"]
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"{report_path}: no recommendation.variant_id; serve a variant folder "
                          f"directly (infertune serve {path}/variants/<id>)") from exc
    if variant_id is None:
        raise ConfigError(f"{report_path} recommends keeping the baseline model, which has no "
                          "variant folder in this run; serve the model itself (infertune serve "
                          "MODEL) or one of the run's variants (infertune serve "
                          f"{path}/variants/<id>)")
    variant = path / "variants" / str(variant_id)
    if not variant.is_dir():
        raise ConfigError(f"{report_path} recommends variant {variant_id!r} but {variant} does "
                          "not exist; rerun infertune optimize or serve another variant")
    serving = report.get("serving") or {}
    policy = serving.get("policy") if isinstance(serving, dict) else None
    if policy is not None and not isinstance(policy, dict):
        raise ConfigError(f"{report_path}: serving.policy must be a mapping of ServePolicy fields")
    policy = dict(policy or {})
    if policy.get("timeout_ms") is None and (path / "scenario.yaml").is_file():
        from infertune.config import load_scenario

        targets = load_scenario(path / "scenario.yaml").slo.targets()
        if targets:
            policy["timeout_ms"] = client_deadline_ms(targets)
    return str(variant), policy


def build_policy(report_policy: dict[str, Any], config: Path | None,
                 overrides: dict[str, Any]) -> ServePolicy:
    """Merge the layers (see the module docstring) into one validated ServePolicy."""
    merged = dict(report_policy)
    if config is not None:
        if not config.is_file():
            raise ConfigError(f"serve config {config} not found; pass a YAML file of "
                              "ServePolicy fields")
        try:
            data = yaml.safe_load(config.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{config}: not valid YAML; check the indentation") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{config}: the top level must be a mapping of ServePolicy fields")
        merged.update(data)
    merged.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return ServePolicy.model_validate(merged)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            raise ConfigError(f"unknown serving policy field {field!r}; see ServePolicy in "
                              "infertune/config.py") from exc
        raise ConfigError(f"serving policy {field} = {err.get('input')!r}: "
                          f"{err['msg']}") from exc


def size_model_threads(adapter: Any, policy: ServePolicy, cores: int) -> tuple[Any, int | None]:
    """The adapter with its intra-op threads sized for its workers (serve/worker_threads.py),
    and the threads each worker gets. torch: ``policy.model_threads``, else cores // workers,
    set process-wide (which is why it lives in the command, a server process, and not in
    create_app): each worker runs a batch on the same pool, so 2 workers x 2 threads on 2
    cores oversubscribe them (a single run of benchmarks/serve_goodput.py at 130 req/s: p50
    27 ms with 1 thread per worker against 37 ms with torch's default 2). onnxruntime: the
    shared session reopened with that many threads when several workers share it, unless the
    variant fixes its own."""
    if adapter.info.runtime != "torch":
        return fit_to_workers(adapter, policy, cores)
    import torch

    threads = threads_per_worker(0, policy, cores)
    torch.set_num_threads(threads)
    return adapter, threads


def int8_warnings(model_ref: str, here: HardwareInfo) -> list[str]:
    """A variant whose recorded INT8 scheme saturates on this CPU (built on a VNNI machine,
    served on one without) still answers, but less accurately: say so at start and in /readyz."""
    folder = Path(model_ref)
    if not (folder / "manifest.json").is_file():
        return []
    scheme = read_manifest(folder, verify=False).int8_scheme()
    risk = int8_saturation_risk(here, *scheme) if scheme else None
    return [risk] if risk else []


def exposure_warnings(host: str, policy: ServePolicy, insecure_no_auth: bool) -> list[str]:
    """Refuse (ConfigError, exit 1) to bind a non-loopback address without an API key unless
    ``insecure_no_auth``; then return the warning to print at start and show on /readyz."""
    if policy.api_key_env or _is_loopback(host):
        return []
    if not insecure_no_auth:
        raise ConfigError(f"refusing to serve on {host} without an API key: anyone who can "
                          "reach the port could use the model; pass --api-key-env NAME (NAME "
                          "holding the key), bind 127.0.0.1, or pass --insecure-no-auth")
    return [f"serving on {host} with no API key (--insecure-no-auth): anyone who can reach "
            "this port can call the model; admin routes stay closed"]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a hostname may resolve anywhere: treat it as exposed


def register(app: typer.Typer) -> None:
    @app.command("serve", help="Serve a model, variant folder or run's recommended variant "
                 "over HTTP (batching, priority queue, cache, metrics). Overload protection is "
                 "on by default: a request with no timeout_ms (and no --timeout-ms) gets the "
                 "deadline max(50 ms, max_wait_ms + 3 x the measured full-batch service time) "
                 "from entering the queue, "
                 "shown on /readyz; a request the queue would make later than its deadline is "
                 "refused at once with 503, a full queue answers 429, and every 200 comes within "
                 "the deadline plus one batch time (/readyz: answer_bound_ms).")
    def serve(
        model: Annotated[str | None, typer.Argument(help="minilm, a model path, a variant "
                                                    "folder, or a run folder with report.json "
                                                    "(or --stable NAME)")] = None,
        config: Annotated[Path | None, typer.Option("--config", help="serve.yaml")] = None,
        host: Annotated[str, typer.Option(help="bind address")] = "127.0.0.1",
        port: Annotated[int, typer.Option(min=0, max=65535)] = 8000,
        max_batch_size: Annotated[int | None, typer.Option("--max-batch-size")] = None,
        max_wait_ms: Annotated[float | None, typer.Option("--max-wait-ms")] = None,
        max_queue: Annotated[int | None, typer.Option("--max-queue")] = None,
        workers: Annotated[int | None, typer.Option(
            "--workers", help="batches run at once (model threads)")] = None,
        redis_url: Annotated[str | None, typer.Option("--redis-url")] = None,
        fast_model: Annotated[str | None, typer.Option(
            "--fast-model", help="cascade: a fast model answering confident inputs")] = None,
        timeout_ms: Annotated[float | None, typer.Option(
            "--timeout-ms", help="default per-request deadline in ms (replaces the overload "
            "bound: max(50 ms, max_wait_ms + 3 full-batch service times))")] = None,
        api_key_env: Annotated[str | None, typer.Option(
            "--api-key-env", help="environment variable holding the API key; required on a "
            "non-loopback --host, and for admin routes (cache purge)")] = None,
        insecure_no_auth: Annotated[bool, typer.Option(
            "--insecure-no-auth", help="allow a non-loopback --host without an API key "
            "(warned at start and on /readyz)")] = False,
        registry: Annotated[Path | None, typer.Option(
            "--registry", help="release registry folder (for --stable)")] = None,
        stable: Annotated[str | None, typer.Option(
            "--stable", help="serve registry releases: this one answers by default")] = None,
        canary: Annotated[str | None, typer.Option("--canary", help="canary release")] = None,
        canary_weight: Annotated[float, typer.Option(
            "--canary-weight", min=0, max=100, help="percent of traffic to the canary")] = 0.0,
        shadow: Annotated[str | None, typer.Option(
            "--shadow", help="release getting a mirrored copy of stable traffic")] = None,
        engine: Annotated[str, typer.Option(
            "--engine", help="local: one uvicorn process; ray: a Ray Serve application whose "
            "replicas autoscale on queue length (needs the ray extra)")] = "local",
        ray_address: Annotated[str | None, typer.Option(
            "--ray-address", help="with --engine ray: join this Ray cluster (e.g. "
            "ray://head:10001 or auto) instead of starting a local one-node Ray")] = None,
        min_replicas: Annotated[int | None, typer.Option(
            "--min-replicas", min=1, help="with --engine ray: keep at least this many replicas "
            "warm, over the warm pool derived from the run's traffic")] = None,
        keep_cores_awake: Annotated[bool, typer.Option(
            "--keep-cores-awake", help="spin an idle-priority process on each core so none "
            "halts between requests: on a VM a halted core wakes late, which adds to latency "
            "(Linux; the cores show busy; serve.yaml: keep_cores_awake)")] = False,
        alerts_out: Annotated[Path | None, typer.Option(
            "--alerts-out", help="write Prometheus alert rules with thresholds from the run's "
            "SLO (and the served policy) to this file")] = None,
    ) -> None:
        from infertune.cli._common import quiet_libraries
        from infertune.models import load
        from infertune.serve import create_app, run_server
        from infertune.serve.model_processes import ModelSource, uses_processes

        if engine not in ("local", "ray"):
            raise ConfigError(f"--engine must be local or ray, got {engine!r}")
        if ray_address is not None and engine != "ray":
            raise ConfigError("--ray-address needs --engine ray")
        if min_replicas is not None and engine != "ray":
            raise ConfigError("--min-replicas needs --engine ray (the local engine is one "
                              "process)")
        if stable is not None:  # several registry releases behind the router (issue 15)
            from infertune.cli.release import open_registry, serve_releases
            from infertune.serve.routing import RoutingState

            layers = {"max_batch_size": max_batch_size, "max_wait_ms": max_wait_ms,
                      "max_queue": max_queue, "workers": workers, "redis_url": redis_url,
                      "timeout_ms": timeout_ms, "api_key_env": api_key_env,
                      "keep_cores_awake": keep_cores_awake or None}
            state = RoutingState(stable=stable, canary=canary, canary_weight=canary_weight,
                                 shadow=shadow)

            def policy_for(recorded: ServePolicy) -> ServePolicy:
                return build_policy(recorded.model_dump(exclude_defaults=True), config, layers)

            if engine == "ray":  # the routing state shared by every replica
                from infertune.rollout.ray_router import serve_releases_on_ray

                reg = open_registry(registry)
                for warning in exposure_warnings(
                        host, policy_for(reg.get(stable).record.policy), insecure_no_auth):
                    typer.echo(f"WARNING: {warning}", err=True)
                quiet_libraries()
                serve_releases_on_ray(reg.root, state, policy_for, host=host, port=port,
                                      address=ray_address, min_replicas=min_replicas,
                                      echo=lambda line: typer.echo(line, err=True))
                return
            serve_releases(registry, state, host=host, port=port, policy_for=policy_for,
                           check_exposure=lambda p: exposure_warnings(host, p, insecure_no_auth))
            return
        if model is None:
            raise ConfigError("name what to serve: a model, variant or run folder, or "
                              "--registry DIR --stable NAME")
        model_ref, report_policy = resolve_target(model)
        policy = build_policy(report_policy, config, {
            "max_batch_size": max_batch_size, "max_wait_ms": max_wait_ms,
            "max_queue": max_queue, "workers": workers, "redis_url": redis_url,
            "timeout_ms": timeout_ms, "api_key_env": api_key_env,
            "keep_cores_awake": keep_cores_awake or None})
        warnings = exposure_warnings(host, policy, insecure_no_auth)
        warnings += int8_warnings(model_ref, detect(with_gpus=False))
        if alerts_out is not None:  # the generator and inputs `infertune export` uses
            from infertune.cli.export import alert_thresholds_for
            from infertune.serve.alerts import write_rules

            write_rules(alerts_out, alert_thresholds_for(model, policy))
            typer.echo(f"alert rules (thresholds from the SLO) written to {alerts_out}", err=True)
        quiet_libraries()
        if engine == "ray":
            from infertune.serve.engines.ray_engine import serve_on_ray  # the optional extra

            serve_on_ray(model, model_ref, policy, fast_model_ref=fast_model, host=host,
                         port=port, address=ray_address, warnings=tuple(warnings),
                         min_replicas=min_replicas, echo=lambda line: typer.echo(line, err=True))
            return
        adapter = load(model_ref)
        fast = load(fast_model) if fast_model else None
        if fast is not None:
            from infertune.serve.cascade import without_spinning

            adapter, fast = without_spinning(adapter, fast)
        adapter, threads = size_model_threads(adapter, policy,
                                              detect(with_gpus=False).effective_cores)
        source = ModelSource(model_ref, adapter.info.version,
                             threads if adapter.info.runtime == "torch" else None)
        app_ = create_app(adapter, policy, fast_adapter=fast, warnings=warnings,
                          model_source=source)
        kind = "processes" if uses_processes(policy.worker_kind, adapter.info.runtime,
                                             source) else "threads"
        shown = f", {threads} model thread(s) per worker" if threads else ""
        shown += ", cores kept awake" if policy.keep_cores_awake else ""
        typer.echo(f"serving {adapter.info.id} ({adapter.info.version}) on http://{host}:{port} "
                   f"— batch<={policy.max_batch_size}, wait<={policy.max_wait_ms} ms, "
                   f"queue<={policy.max_queue}, workers={policy.workers} ({kind}){shown}; "
                   "/readyz turns 200 after warm-up", err=True)
        for warning in warnings:
            typer.echo(f"WARNING: {warning}", err=True)
        run_server(app_, host=host, port=port)
