"""``RunDir``: a run folder's one reader (and its paths: ``RunPaths``, the one list of its file
names, which optimize writes through).

    run = RunDir("runs/demo")
    run.exists_run()                  report.json is there: a finished optimize run
    run.scenario() / .hardware() / .profile() / .serving() / .extras()
    run.variant("onnx-int8")          VariantDir(path, manifest)
    run.report(Report)                report.json as the report layer's type
    run.record(RunRecord)             run.json (+ hardware, profile) as optimize's type

Each reader returns a typed object or raises one line that names the file and the fix
(ConfigError; a variant's manifest keeps models' ModelLoadError). ``report`` and ``record``
take their type from the caller: Report (report/) and RunRecord (optimize/) sit above this
package, which serve/ imports too (see the package docstring).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from infertune.artifacts.base import RERUN, read_object
from infertune.artifacts.files import ExtrasFile, ServingFile
from infertune.config import Scenario, load_scenario
from infertune.errors import ConfigError, DataError
from infertune.hardware import HardwareInfo
from infertune.measure.profile import Profile
from infertune.models.variant import MANIFEST, Manifest, read_manifest

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class ReadsReport(Protocol[T_co]):
    """A report type: ``from_dict(data, source)`` (report.schema.Report)."""

    def from_dict(self, data: dict[str, Any], source: str = ...) -> T_co: ...


class ReadsRecord(Protocol[T_co]):
    """A run record type: ``load(root)``, which reads through RunDir (optimize.record)."""

    def load(self, root: Path) -> T_co: ...


@dataclass(frozen=True)
class RunPaths:
    """Where each file of a run folder is (DESIGN.md, "Run directory")."""

    root: Path

    @property
    def scenario(self) -> Path:
        return self.root / "scenario.yaml"

    @property
    def hardware(self) -> Path:
        return self.root / "hardware.json"

    @property
    def profile(self) -> Path:
        return self.root / "profile.json"

    @property
    def variants(self) -> Path:
        return self.root / "variants"

    def variant(self, variant_id: str) -> Path:
        return self.variants / variant_id

    def manifest(self, variant_id: str) -> Path:
        """The variant's manifest.json (models.variant.MANIFEST)."""
        return self.variant(variant_id) / MANIFEST

    @property
    def serving(self) -> Path:
        return self.root / "serving.json"

    @property
    def extras(self) -> Path:
        return self.root / "extras.json"

    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    @property
    def report_json(self) -> Path:
        return self.root / "report.json"

    @property
    def report_md(self) -> Path:
        return self.root / "report.md"

    @property
    def report_html(self) -> Path:
        return self.root / "report.html"

    @property
    def plots(self) -> Path:
        return self.root / "plots"

    def create(self) -> None:
        self.variants.mkdir(parents=True, exist_ok=True)
        self.plots.mkdir(parents=True, exist_ok=True)


@dataclass(frozen=True)
class VariantDir:
    """A variant's folder in the run and its verified manifest."""

    path: Path
    manifest: Manifest


class RunDir:
    """The reader of one run folder (see the module docstring)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.paths = RunPaths(self.root)

    def __repr__(self) -> str:
        return f"RunDir({str(self.root)!r})"

    def exists_run(self) -> bool:
        """True when the folder holds report.json: what optimize leaves when it finishes."""
        return self.root.is_dir() and self.paths.report_json.is_file()

    def read(self, path: Path, fix: str = RERUN) -> dict[str, Any]:
        """One JSON object of this run, for a reader below the layer that types it (serve/
        reads report.json's scale-out figure so)."""
        return read_object(path, fix)

    def scenario(self) -> Scenario:
        path = self.paths.scenario
        if not path.is_file():
            raise ConfigError(f"{path}: not found; {RERUN}")
        return load_scenario(path)

    def hardware(self) -> HardwareInfo:
        return _typed(self.paths.hardware, HardwareInfo.from_dict)

    def profile(self) -> Profile:
        return _typed(self.paths.profile, Profile.from_dict)

    def serving(self) -> ServingFile:
        return ServingFile.load(self.paths.serving)

    def extras(self) -> ExtrasFile:
        return ExtrasFile.load(self.paths.extras)

    def variant_ids(self) -> list[str]:
        folder = self.paths.variants
        return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []

    def variant(self, variant_id: str) -> VariantDir:
        path = self.paths.variant(variant_id)
        if not path.is_dir():
            raise ConfigError(f"variant {variant_id!r}: {path} not found; pick one of "
                              f"{self.variant_ids()}, or {RERUN}")
        return VariantDir(path, read_manifest(path))

    def report(self, schema: ReadsReport[T]) -> T:
        """report.json as ``schema`` (``run.report(Report)``)."""
        path = self.paths.report_json
        if not path.is_file():
            raise ConfigError(f"{path} not found; pass a run folder holding report.json (the "
                              "folder infertune optimize --out wrote)")
        data = self.read(path, fix="re-create it with infertune optimize or infertune advise")
        return schema.from_dict(data, source=str(path))

    def record(self, schema: ReadsRecord[T]) -> T:
        return schema.load(self.root)


def _typed(path: Path, make: Callable[[dict[str, Any]], T]) -> T:
    data = read_object(path)
    try:
        return make(data)
    except (ConfigError, DataError, KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: {exc}; {RERUN}") from exc
