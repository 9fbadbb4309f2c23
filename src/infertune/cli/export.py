"""`infertune export RUN --to triton|kubernetes|kserve --out DIR` (a release: `infertune
export NAME --registry DIR ...`) — write the chosen configuration for another engine: a Triton
model repository, Kubernetes manifests, or a KServe InferenceService. Every value comes from
the run (report.json, the variant's manifest.json, scenario.yaml, hardware.json) or the
release's record, commented with where it came from; DIR/export.json lists them with their
sources (``--json`` prints it).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from infertune.artifacts import RunDir
from infertune.config import ServePolicy
from infertune.errors import ConfigError

if TYPE_CHECKING:
    from infertune.export.deploy_plan import DeployPlan
    from infertune.serve.alerts import AlertThresholds


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
    from infertune.export.deploy_plan import measured_capacity  # the serve extra: see export()
    from infertune.export.source import read_source
    from infertune.serve.alerts import AlertThresholds, run_slo

    run = RunDir(ref)
    if run.exists_run() and run.paths.scenario.is_file():
        src = read_source(ref)
        return AlertThresholds.derive(src.slo, policy, measured_capacity(src))
    return AlertThresholds.derive(run_slo(ref), policy)


def _write_gates(to: Target, p: DeployPlan, out: Path, *, image: str, prometheus_url: str,
                 namespace: str) -> list[Path]:
    """Argo Rollouts or Flagger objects asking infertune's analysis endpoint for verdicts."""
    from infertune.export.argo import write_argo
    from infertune.export.flagger import write_flagger

    write = write_argo if to is Target.argo_rollouts else write_flagger
    return write(p, out, image=image, prometheus_url=prometheus_url, namespace=namespace)


def register(app: typer.Typer) -> None:
    @app.command("export", help="Export a run's (or release's) measured configuration to "
                 "Triton, Kubernetes or KServe, each value commented with its source.")
    def export(
        source: Annotated[str, typer.Argument(help="a run folder (runs/<name>), or a release "
                                              "name with --registry")],
        to: Annotated[Target, typer.Option(
            "--to", help="triton | kubernetes | kserve | argo-rollouts | flagger")],
        out: Annotated[Path, typer.Option("--out", help="folder to write")],
        variant: Annotated[str | None, typer.Option(
            "--variant", help="export this variant of the run instead of the recommended "
            "one")] = None,
        image: Annotated[str, typer.Option(
            "--image", help="container image with infertune and /models/<variant id>")
        ] = "infertune:latest",
        autoscaler: Annotated[AutoscalerChoice, typer.Option(
            "--autoscaler", help="kubernetes: hpa (prometheus-adapter) or keda")
        ] = AutoscalerChoice.hpa,
        prometheus_url: Annotated[str, typer.Option(
            "--prometheus-url", help="keda: the Prometheus server KEDA queries")
        ] = "http://prometheus-operated.monitoring.svc:9090",
        namespace: Annotated[str, typer.Option(
            "--namespace", help="argo-rollouts, flagger: the analysis endpoint's namespace")
        ] = "default",
        name: Annotated[str | None, typer.Option("--name", help="object name")] = None,
        cpus: Annotated[float | None, typer.Option(
            "--cpus", min=0.001, help="CPU per pod (default: the cores the run measured on)")
        ] = None,
        min_replicas: Annotated[int | None, typer.Option("--min-replicas", min=1)] = None,
        max_replicas: Annotated[int | None, typer.Option("--max-replicas", min=1)] = None,
        canary_percent: Annotated[int | None, typer.Option(
            "--canary-percent", min=0, max=100, help="kserve: canaryTrafficPercent")] = None,
        registry: Annotated[Path | None, typer.Option(
            "--registry", help="release registry: SOURCE names a release in it")] = None,
        overwrite: Annotated[bool, typer.Option("--overwrite")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="print export.json")] = False,
    ) -> None:
        # export/ reaches serve/ (alert rules), whose package needs the serve extra
        # (starlette, prometheus_client): imported when the command runs, so the rest of the
        # CLI starts without it
        from infertune.export.deploy_plan import Overrides, plan, summary
        from infertune.export.kserve import write_kserve
        from infertune.export.kubernetes import write_kubernetes
        from infertune.export.source import read_release, read_source
        from infertune.export.triton import write_triton

        _check_out(out, overwrite)
        if registry is not None:
            if variant is not None:
                raise ConfigError("--variant picks a variant of a run; a release holds one "
                                  "variant already: drop --variant")
            src = read_release(registry, source)
        else:
            src = read_source(source, variant)
        p = plan(src, Overrides(name=name, cpus=cpus, min_replicas=min_replicas,
                                max_replicas=max_replicas, canary_percent=canary_percent))
        if to is Target.triton:
            files = write_triton(p, out)
        elif to is Target.kubernetes:
            files = write_kubernetes(p, out, image=image, autoscaler=autoscaler.value,
                                     prometheus_url=prometheus_url)
        elif to is Target.kserve:
            files = write_kserve(p, out, image=image)
        else:
            files = _write_gates(to, p, out, image=image, prometheus_url=prometheus_url,
                                 namespace=namespace)
        record = summary(p, to.value, [str(f.relative_to(out)) for f in files]).to_json()
        (out / "export.json").write_text(record)
        if as_json:
            typer.echo(record, nl=False)
            return
        typer.echo(f"wrote {len(files)} file(s) for {to.value} to {out} from {src.kind} "
                   f"{src.name} (variant {src.manifest.id}): batch <= {p.max_batch_size.value}, "
                   f"wait <= {p.max_wait_us.value} us, {p.workers.value} instance(s) x "
                   f"{p.intra_op_threads.value} thread(s); sources in {out}/export.json")
