"""What an export reads: a run folder (or a release folder) through typed readers of its saved
artifacts, never optimize's in-memory state.

    runs/<name>/report.json              Report (report/schema.py): recommendation, serving
                                         policy, the measured policy and variant rows
    runs/<name>/scenario.yaml            Scenario: the SLO and the traffic
    runs/<name>/hardware.json            HardwareInfo: the cores the run measured on
    runs/<name>/variants/<id>/           the variant folder, its manifest.json verified by hash

A release (issue 15) is read from the release registry: its record (serve policy, scenario),
its verified, content-addressed variant folder, the source run's report.json saved beside it,
and, when the release is a canary, the weight of the latest routing event.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import ValidationError

from infertune.artifacts import RunDir
from infertune.config import (
    SLO,
    Scenario,
    ServePolicy,
    TrafficFacts,
    client_deadline_ms,
)
from infertune.errors import ConfigError
from infertune.hardware import HardwareInfo
from infertune.models.variant import Manifest, read_manifest
from infertune.report.schema import PolicyRow, Report, VariantRow
from infertune.rollout.release_registry import Registry, Release
from infertune.serve.routing import RoutingState

SourceKind = Literal["run", "release"]


@dataclass(frozen=True)
class ExportSource:
    """Everything an export reads, each piece already validated."""

    kind: SourceKind
    path: Path
    name: str
    variant_dir: Path
    manifest: Manifest
    policy: ServePolicy
    policy_origin: str  # e.g. "report.json serving.policy (policy p3: <why>)"
    policy_row: PolicyRow | None
    variant_row: VariantRow | None
    slo: SLO
    traffic: TrafficFacts
    hardware: HardwareInfo | None
    canary_percent: int | None = None

    @property
    def label(self) -> str:
        """What was exported, for headers: "run runs/demo" or "release b (registry R)"."""
        if self.kind == "release":
            return f"release {self.name} (registry {self.path})"
        return f"run {self.path}"

    @property
    def deadline_ms(self) -> float | None:
        """serve's deadline: the policy's timeout_ms, else config.client_deadline_ms (ten
        times the loosest SLO target)."""
        return self.policy.timeout_ms or client_deadline_ms(self.slo.targets())


def read_source(path: str | Path, variant_id: str | None = None) -> ExportSource:
    """A run folder (the folder `infertune optimize --out` wrote) as an ExportSource."""
    folder = Path(path)
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder; pass a run folder (runs/<name>, with "
                          "report.json), or a release name with --registry DIR")
    run = RunDir(folder)
    if not run.exists_run():
        raise ConfigError(f"{folder} has no report.json; pass the folder `infertune optimize "
                          "--out` wrote, or a release name with --registry DIR")
    report = run.report(Report)
    chosen = variant_id or (report.recommendation.variant_id if report.recommendation else None)
    if chosen is None:
        raise ConfigError(f"{folder}/report.json recommends keeping the baseline model, which "
                          "has no variant folder; export one of the run's variants with "
                          "--variant ID (see variants/ in the run)")
    vdir = run.paths.variant(chosen)
    if not run.paths.manifest(chosen).is_file():
        raise ConfigError(f"variant {chosen!r}: {vdir}/manifest.json not found; pick one of "
                          f"{run.variant_ids()} with --variant")
    manifest = run.variant(chosen).manifest
    policy, origin, row = _policy(report, chosen)
    scenario = _scenario(run)
    return ExportSource(kind="run", path=folder, name=folder.name, variant_dir=vdir,
                        manifest=manifest, policy=policy, policy_origin=origin, policy_row=row,
                        variant_row=_variant_row(report, chosen), slo=scenario.slo,
                        traffic=scenario.traffic, hardware=_hardware(run))


def read_release(registry: Path, name: str) -> ExportSource:
    """Release ``name`` of the registry at ``registry`` as an ExportSource."""
    if not (registry / "registry.sqlite").is_file():
        raise ConfigError(f"{registry} is not a release registry (no registry.sqlite); pass "
                          "the --registry folder `infertune release add` used")
    reg = Registry(registry)
    try:
        release = reg.get(name)
        vdir = reg.verified_path(name)
        canary = _canary_weight(reg, release)
    finally:
        reg.close()
    rec = release.record
    report_path = registry / "reports" / f"{rec.report_sha256}.json"
    report = Report.load_json(report_path) if rec.report_sha256 and report_path.is_file() \
        else None
    row = None
    serving = report.serving if report is not None else None
    if report is not None and serving is not None and serving.variant_id in (None,
                                                                             rec.variant_id):
        row = next((p for p in report.policies if p.policy_id == serving.policy_id), None)
    scenario = _scenario_text(rec.scenario_yaml, f"release {name!r} scenario")
    # the registry keeps no hardware record: the source run's, when it is still there
    source_run = RunDir(rec.source_run) if rec.source_run else None
    return ExportSource(
        kind="release", path=registry, name=name, variant_dir=vdir, manifest=read_manifest(vdir),
        policy=rec.policy, policy_origin=f"release {name!r} serve policy (registry record)",
        policy_row=row, variant_row=_variant_row(report, rec.variant_id) if report else None,
        slo=scenario.slo, traffic=scenario.traffic,
        hardware=_hardware(source_run) if source_run is not None else None,
        canary_percent=canary)


def _canary_weight(reg: Registry, release: Release) -> int | None:
    """The weight of the latest routing event that names this release the canary."""
    if release.status != "canary":
        return None
    for event in reversed(reg.events()):
        if event.state is None:
            continue
        state = RoutingState.model_validate_json(event.state)
        if state.canary == release.record.name:
            return round(state.canary_weight)
    return None


def _variant_row(report: Report, variant_id: str) -> VariantRow | None:
    return next((r for r in report.variants if r.variant_id == variant_id), None)


def _scenario_text(text: str | None, what: str) -> Scenario:
    if text is None:
        return Scenario()
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what}: not valid YAML; re-add the release") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{what}: the top level must be a mapping; re-add the release")
    return Scenario.from_dict(data, source=what)


def _scenario(run: RunDir) -> Scenario:
    path = run.paths.scenario
    if not path.is_file():
        raise ConfigError(f"{path} not found: the SLO and traffic every threshold derives from "
                          "live there; re-run infertune optimize with --scenario")
    return run.scenario()


def _policy(report: Report, variant_id: str) -> tuple[ServePolicy, str, PolicyRow | None]:
    serving = report.serving
    if serving is None or serving.variant_id not in (None, variant_id):
        # the saved policy was measured for another variant: do not pass it off as this one's
        return (ServePolicy(), f"ServePolicy defaults: report.json has no serving policy "
                f"measured for variant {variant_id!r}", None)
    try:
        policy = ServePolicy.model_validate(serving.policy)
    except ValidationError as exc:
        raise ConfigError(f"report.json serving.policy is not a valid ServePolicy "
                          f"({exc.errors()[0]['msg']}); re-run infertune optimize") from exc
    row = next((p for p in report.policies if p.policy_id == serving.policy_id), None)
    why = f": {serving.why}" if serving.why else ""
    return policy, f"report.json serving.policy (policy {serving.policy_id}{why})", row


def _hardware(run: RunDir) -> HardwareInfo | None:
    return run.hardware() if run.paths.hardware.is_file() else None

