"""The typed layer under ``infertune serve`` and ``api.serve``: what to serve (a model, a
variant folder, or a run folder's recommended variant and policy), the policy's layers, the
exposure and INT8 warnings, and the model threads per worker.

Policy precedence (later wins): ServePolicy defaults < a run's report.json ``serving.policy``
< ``--config serve.yaml`` < command-line flags. Each layer is a ServePolicy whose *set*
fields (``model_dump(exclude_unset=True)``) are the ones it changes, as in ``api.ServeOptions``.

Given a run directory (a folder with report.json), the recommended variant is served; read
through artifacts.RunDir as a report.schema.Report:
  report.recommendation.variant_id   folder name under <run>/variants/
  report.serving.policy              ServePolicy fields (optional)
When that policy sets no timeout_ms, the deadline defaults to ten times the loosest latency
target of the run's scenario.yaml SLO (config.client_deadline_ms: it protects callers from
answers too late to use; the SLO is judged on the answers).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from infertune.artifacts import RunDir
from infertune.config import ServePolicy, client_deadline_ms
from infertune.errors import ConfigError
from infertune.hardware import HardwareInfo, int8_saturation_risk
from infertune.models.variant import read_manifest
from infertune.report.schema import Report
from infertune.serve.worker_threads import fit_to_workers, threads_per_worker


def resolve_target(ref: str) -> tuple[str, ServePolicy]:
    """(model reference, the policy layer of a run's report) for a model, variant or run
    folder; the layer sets no field for a model or a variant folder."""
    path = Path(ref)
    run = RunDir(path)
    if not run.exists_run():
        return ref, ServePolicy()
    report_path = run.paths.report_json
    report = run.report(Report)
    if report.recommendation is None:
        raise ConfigError(f"{report_path}: no recommendation.variant_id; serve a variant folder "
                          f"directly (infertune serve {path}/variants/<id>)")
    variant_id = report.recommendation.variant_id
    if variant_id is None:
        raise ConfigError(f"{report_path} recommends keeping the baseline model, which has no "
                          "variant folder in this run; serve the model itself (infertune serve "
                          "MODEL) or one of the run's variants (infertune serve "
                          f"{path}/variants/<id>)")
    variant = run.paths.variant(variant_id)
    if not variant.is_dir():
        raise ConfigError(f"{report_path} recommends variant {variant_id!r} but {variant} does "
                          "not exist; rerun infertune optimize or serve another variant")
    policy: dict[str, float | int | str | bool | None] = (
        dict(report.serving.policy) if report.serving else {})
    if policy.get("timeout_ms") is None and run.paths.scenario.is_file():
        targets = run.scenario().slo.targets()
        if targets:
            policy["timeout_ms"] = client_deadline_ms(targets)
    return str(variant), policy_layer(policy)


def policy_layer(fields: Mapping[str, object]) -> ServePolicy:
    """The fields given (None: not given) as a layer: a ServePolicy whose set fields are
    exactly those; a bad one is a ConfigError naming it."""
    return _validated({k: v for k, v in fields.items() if v is not None})


def build_policy(report_policy: ServePolicy, config: Path | None,
                 overrides: ServePolicy) -> ServePolicy:
    """Merge the layers (see the module docstring) into one validated ServePolicy: the
    report's, then ``config`` (serve.yaml), then ``overrides`` (the flags), each by the
    fields it sets."""
    merged = report_policy.model_dump(exclude_unset=True)
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
    merged.update(overrides.model_dump(exclude_unset=True))
    return _validated(merged)


def _validated(fields: Mapping[str, object]) -> ServePolicy:
    # Mapping[str, object], not a ServePolicy: these are the fields before they are checked
    # (serve.yaml's mapping merged with the layers' set fields), and this is where they become
    # one; a cross-field rule can only be checked on the merge
    try:
        return ServePolicy.model_validate(fields)
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
    import torch  # the torch extra: see cli/__init__

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
