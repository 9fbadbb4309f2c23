"""What an export reads: a run folder (or a release folder) through typed readers of its saved
artifacts, never optimize's in-memory state.

    runs/<name>/report.json              Report (report/schema.py): recommendation, serving
                                         policy, the measured policy and variant rows
    runs/<name>/scenario.yaml            Scenario: the SLO and the traffic
    runs/<name>/hardware.json            HardwareInfo: the cores the run measured on
    runs/<name>/variants/<id>/           the variant folder, its manifest.json verified by hash

A release folder (issue 15's registry copy) holds the same three files beside its variant
folder and a ``release.json`` record; it is read the same way once the record names the
variant (see ``read_source``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from infertune.config import SLO, Scenario, ServePolicy, TrafficFacts, load_scenario
from infertune.errors import ConfigError
from infertune.hardware import HardwareInfo
from infertune.models.variant import Manifest, read_manifest
from infertune.report.schema import PolicyRow, Report, VariantRow

SourceKind = Literal["run", "release"]


class ReleaseRecord(BaseModel):
    """The part of a release record an export needs; other fields are the registry's own."""

    model_config = ConfigDict(extra="ignore")

    name: str
    variant_id: str
    variant_dir: str = "variant"  # relative to the release folder
    canary_percent: int | None = None


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
    def deadline_ms(self) -> float | None:
        """serve's deadline: the policy's timeout_ms, else the loosest SLO target."""
        targets = self.slo.targets()
        return self.policy.timeout_ms or (max(targets.values()) if targets else None)


def read_source(path: str | Path, variant_id: str | None = None) -> ExportSource:
    """A run folder (report.json) or a release folder (release.json) as an ExportSource."""
    folder = Path(path)
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder; pass a run folder (runs/<name>, with "
                          "report.json) or a release folder (with release.json)")
    if (folder / "release.json").is_file():
        return _read_release(folder, variant_id)
    if (folder / "report.json").is_file():
        return _read_run(folder, variant_id, kind="run", name=folder.name)
    raise ConfigError(f"{folder} has neither report.json nor release.json; pass the folder "
                      "`infertune optimize --out` wrote (or a release folder)")


def _read_run(folder: Path, variant_id: str | None, *, kind: SourceKind, name: str,
              variant_dir: Path | None = None, canary: int | None = None) -> ExportSource:
    report = Report.load_json(folder / "report.json")
    scenario = _scenario(folder)
    chosen = variant_id or (report.recommendation.variant_id if report.recommendation else None)
    if chosen is None:
        raise ConfigError(f"{folder}/report.json recommends keeping the baseline model, which "
                          "has no variant folder; export one of the run's variants with "
                          "--variant ID (see variants/ in the run)")
    vdir = variant_dir or folder / "variants" / chosen
    if not (vdir / "manifest.json").is_file():
        raise ConfigError(f"variant {chosen!r}: {vdir}/manifest.json not found; pick one of "
                          f"{_variant_ids(folder)} with --variant")
    manifest = read_manifest(vdir)
    policy, origin, row = _policy(report, chosen)
    variant_row = next((r for r in report.variants if r.variant_id == chosen), None)
    return ExportSource(kind=kind, path=folder, name=name, variant_dir=vdir, manifest=manifest,
                        policy=policy, policy_origin=origin, policy_row=row,
                        variant_row=variant_row, slo=scenario.slo, traffic=scenario.traffic,
                        hardware=_hardware(folder), canary_percent=canary)


def _read_release(folder: Path, variant_id: str | None) -> ExportSource:
    path = folder / "release.json"
    try:
        record = ReleaseRecord.model_validate(json.loads(path.read_text()))
    except (json.JSONDecodeError, ValidationError) as exc:
        raise ConfigError(f"{path}: not a release record with name and variant_id; re-create "
                          "it with infertune release add") from exc
    if variant_id is not None and variant_id != record.variant_id:
        raise ConfigError(f"release {record.name!r} holds variant {record.variant_id!r}, not "
                          f"{variant_id!r}; drop --variant or export another release")
    return _read_run(folder, record.variant_id, kind="release", name=record.name,
                     variant_dir=folder / record.variant_dir, canary=record.canary_percent)


def _scenario(folder: Path) -> Scenario:
    path = folder / "scenario.yaml"
    if not path.is_file():
        raise ConfigError(f"{path} not found: the SLO and traffic every threshold derives from "
                          "live there; re-run infertune optimize with --scenario")
    return load_scenario(path)


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


def _hardware(folder: Path) -> HardwareInfo | None:
    path = folder / "hardware.json"
    if not path.is_file():
        return None
    try:
        return HardwareInfo.from_dict(json.loads(path.read_text()))
    except (json.JSONDecodeError, TypeError, KeyError) as exc:
        raise ConfigError(f"{path}: not a hardware record ({exc}); re-run infertune "
                          "optimize") from exc


def _variant_ids(folder: Path) -> list[str]:
    root = folder / "variants"
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
