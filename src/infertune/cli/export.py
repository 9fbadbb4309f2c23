"""`infertune export RUN --to triton|kubernetes|kserve --out DIR` (a release: `infertune
export NAME --registry DIR ...`) — write the chosen configuration for another engine: a Triton
model repository, Kubernetes manifests, or a KServe InferenceService. Every value comes from
the run (report.json, the variant's manifest.json, scenario.yaml, hardware.json) or the
release's record, commented with where it came from; DIR/export.json lists them with their
sources (``--json`` prints it).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from infertune.artifacts import RunDir
from infertune.config import ServePolicy
from infertune.errors import ConfigError
from infertune.export.argo import write_argo
from infertune.export.deploy_plan import DeployPlan, Overrides, measured_capacity, plan, summary
from infertune.export.flagger import write_flagger
from infertune.export.kserve import write_kserve
from infertune.export.kubernetes import write_kubernetes
from infertune.export.source import read_release, read_source
from infertune.export.triton import write_triton
from infertune.serve.alerts import AlertThresholds, run_slo


class Target(StrEnum):
    triton = "triton"
    kubernetes = "kubernetes"
    kserve = "kserve"
    argo_rollouts = "argo-rollouts"
    flagger = "flagger"


class AutoscalerChoice(StrEnum):
    hpa = "hpa"
    keda = "keda"


def _check_out(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; pass a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise ConfigError(f"--out {out} is not empty; pass --overwrite to write over it, or "
                          "another folder")


def alert_thresholds_for(ref: str, policy: ServePolicy) -> AlertThresholds:
    """The alert thresholds `infertune serve REF` writes: for a run folder, the same inputs
    the export uses (the SLO and the measured capacity of report.json) with the policy being
    served; for anything else, the SLO alone (none: no latency rule)."""

    run = RunDir(ref)
    if run.exists_run() and run.paths.scenario.is_file():
        src = read_source(ref)
        return AlertThresholds.derive(src.slo, policy, measured_capacity(src))
    return AlertThresholds.derive(run_slo(ref), policy)


def _write_gates(to: Target, p: DeployPlan, out: Path, *, image: str, prometheus_url: str,
                 namespace: str) -> list[Path]:
    """Argo Rollouts or Flagger objects asking infertune's analysis endpoint for verdicts."""

    write = write_argo if to is Target.argo_rollouts else write_flagger
    return write(p, out, image=image, prometheus_url=prometheus_url, namespace=namespace)


Source = Annotated[str, typer.Argument(
    help="a run folder (runs/<name>), or a release name with --registry")]
To = Annotated[Target, typer.Option(
    "--to", help="triton | kubernetes | kserve | argo-rollouts | flagger")]
Out = Annotated[Path, typer.Option("--out", help="folder to write")]
Variant = Annotated[str | None, typer.Option(
    "--variant", help="export this variant of the run instead of the recommended one")]
Image = Annotated[str, typer.Option(
    "--image", help="container image with infertune and /models/<variant id>")]
Autoscaler = Annotated[AutoscalerChoice, typer.Option(
    "--autoscaler", help="kubernetes: hpa (prometheus-adapter) or keda")]
PrometheusUrl = Annotated[str, typer.Option(
    "--prometheus-url", help="keda: the Prometheus server KEDA queries")]
Namespace = Annotated[str, typer.Option(
    "--namespace", help="argo-rollouts, flagger: the analysis endpoint's namespace")]
Name = Annotated[str | None, typer.Option("--name", help="object name")]
Cpus = Annotated[float | None, typer.Option(
    "--cpus", min=0.001, help="CPU per pod (default: the cores the run measured on)")]
MinReplicas = Annotated[int | None, typer.Option("--min-replicas", min=1)]
MaxReplicas = Annotated[int | None, typer.Option("--max-replicas", min=1)]
CanaryPercent = Annotated[int | None, typer.Option(
    "--canary-percent", min=0, max=100, help="kserve: canaryTrafficPercent")]
Registry = Annotated[Path | None, typer.Option(
    "--registry", help="release registry: SOURCE names a release in it")]
Overwrite = Annotated[bool, typer.Option("--overwrite")]
AsJson = Annotated[bool, typer.Option("--json", help="print export.json")]


@dataclass(frozen=True)
class ExportOptions:
    """``infertune export SOURCE --to TARGET --out DIR``, checked when built: ``out`` empty
    (or ``overwrite``), and no ``variant`` for a release (``registry``)."""

    source: str
    to: Target
    out: Path
    variant: str | None = None
    image: str = "infertune:latest"
    autoscaler: AutoscalerChoice = AutoscalerChoice.hpa
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"
    namespace: str = "default"
    name: str | None = None  # the plan's overrides: deploy_plan.Overrides
    cpus: float | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    canary_percent: int | None = None
    registry: Path | None = None
    overwrite: bool = False

    def __post_init__(self) -> None:
        _check_out(self.out, self.overwrite)
        if self.registry is not None and self.variant is not None:
            raise ConfigError("--variant picks a variant of a run; a release holds one "
                              "variant already: drop --variant")


def export(source: Source, to: To, out: Out, variant: Variant = None,
           image: Image = "infertune:latest", autoscaler: Autoscaler = AutoscalerChoice.hpa,
           prometheus_url: PrometheusUrl = "http://prometheus-operated.monitoring.svc:9090",
           namespace: Namespace = "default", name: Name = None, cpus: Cpus = None,
           min_replicas: MinReplicas = None, max_replicas: MaxReplicas = None,
           canary_percent: CanaryPercent = None, registry: Registry = None,
           overwrite: Overwrite = False, as_json: AsJson = False) -> None:
    run(ExportOptions(source, to, out, variant, image, autoscaler, prometheus_url, namespace,
                      name, cpus, min_replicas, max_replicas, canary_percent, registry,
                      overwrite), as_json=as_json)


def register(app: typer.Typer) -> None:
    app.command("export", help="Export a run's (or release's) measured configuration to "
                "Triton, Kubernetes or KServe, each value commented with its source.")(export)


def run(options: ExportOptions, *, as_json: bool = False) -> None:
    """Plan the deployment from the run or release, write the target's files and export.json,
    then print export.json (``as_json``) or a one-line summary."""
    o = options
    src = (read_release(o.registry, o.source) if o.registry is not None
           else read_source(o.source, o.variant))
    p = plan(src, Overrides(name=o.name, cpus=o.cpus, min_replicas=o.min_replicas,
                            max_replicas=o.max_replicas, canary_percent=o.canary_percent))
    files = _write(o, p)
    record = summary(p, o.to.value, [str(f.relative_to(o.out)) for f in files]).to_json()
    (o.out / "export.json").write_text(record)
    if as_json:
        typer.echo(record, nl=False)
        return
    typer.echo(f"wrote {len(files)} file(s) for {o.to.value} to {o.out} from {src.kind} "
               f"{src.name} (variant {src.manifest.id}): batch <= {p.max_batch_size.value}, "
               f"wait <= {p.max_wait_us.value} us, {p.workers.value} instance(s) x "
               f"{p.intra_op_threads.value} thread(s); sources in {o.out}/export.json")


def _write(o: ExportOptions, p: DeployPlan) -> list[Path]:
    if o.to is Target.triton:
        return write_triton(p, o.out)
    if o.to is Target.kubernetes:
        return write_kubernetes(p, o.out, image=o.image, autoscaler=o.autoscaler.value,
                                prometheus_url=o.prometheus_url)
    if o.to is Target.kserve:
        return write_kserve(p, o.out, image=o.image)
    return _write_gates(o.to, p, o.out, image=o.image, prometheus_url=o.prometheus_url,
                        namespace=o.namespace)
