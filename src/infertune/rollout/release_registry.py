"""The release registry: immutable releases in SQLite, their variant folders content-addressed.

    <root>/registry.sqlite          releases, their status, the append-only event log, feedback
    <root>/artifacts/<digest>/      a copy of the variant folder; digest = SHA-256 over every
                                    file's path and SHA-256, so equal folders share one copy
    <root>/reports/<sha256>.json    the source run's report.json, as it was at `release add`

A release records the variant's manifest facts (runtime, precision, passes, preprocessing,
library versions, source model hash), its serve policy, the scenario and the source run.
The record never changes after `release add`; only the status column does (registered ->
canary/shadow -> stable -> retired, or rolled_back), and every change is an event.
The folder is re-hashed whenever it is served (``verified_path``), and nothing is deleted
before an explicit ``prune``. Root: ``--registry DIR``, else $INFERTUNE_REGISTRY, else
$XDG_DATA_HOME/infertune/registry (~/.local/share/infertune/registry).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infertune.artifacts import RunDir
from infertune.config import QualityFloor, ServePolicy
from infertune.errors import ConfigError, ModelLoadError
from infertune.models.variant import Preprocessing, read_manifest, sha256_file
from infertune.report.schema import Report
from infertune.serve.routing import NAME_PATTERN, RoutingEvent

ReleaseStatus = Literal["registered", "canary", "shadow", "stable", "retired", "rolled_back"]
DB_NAME = "registry.sqlite"
SCHEMA = """
CREATE TABLE IF NOT EXISTS releases (
    name TEXT PRIMARY KEY, record TEXT NOT NULL, created_at REAL NOT NULL,
    status TEXT NOT NULL, status_reason TEXT, status_time REAL NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, kind TEXT NOT NULL,
    release TEXT, reason TEXT, state TEXT);
CREATE TABLE IF NOT EXISTS feedback (
    id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, request_id TEXT NOT NULL,
    release TEXT NOT NULL, unit TEXT, metric TEXT NOT NULL, value INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS feedback_metric ON feedback (metric, release);
"""


class ReleaseRecord(BaseModel):
    """What `release add` recorded; immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN)
    digest: str
    variant_id: str
    created_at: float
    source: str  # the folder given to `release add`
    source_run: str | None = None
    report_sha256: str | None = None
    policy: ServePolicy
    scenario_yaml: str | None = None
    quality_floor: QualityFloor | None = None
    runtime: str
    precision: str
    kind: str
    task: str
    passes: list[str]
    preprocessing: Preprocessing
    libraries: dict[str, str]
    source_model: dict[str, str]


class Release(BaseModel):
    model_config = ConfigDict(extra="forbid")

    record: ReleaseRecord
    status: ReleaseStatus
    status_reason: str | None = None
    status_time: float


class EventRow(BaseModel):
    id: int
    time: float
    kind: str
    release: str | None
    reason: str | None
    state: str | None  # the routing state after the change, as JSON


def default_root(environ: Mapping[str, str]) -> Path:
    if environ.get("INFERTUNE_REGISTRY"):
        return Path(environ["INFERTUNE_REGISTRY"])
    data_home = environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "infertune" / "registry"


def tree_digest(folder: Path) -> str:
    """SHA-256 over the sorted (relative path, file SHA-256) pairs of every file."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(folder).as_posix()}\0{sha256_file(path)}\n".encode())
    return digest.hexdigest()


class Registry:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        try:
            (self.root / "artifacts").mkdir(parents=True, exist_ok=True)
            (self.root / "reports").mkdir(exist_ok=True)
            # one connection shared by the server's threads (sinks run in a thread pool)
            self.db = sqlite3.connect(self.root / DB_NAME, check_same_thread=False)
            # WAL: readers (release list, ab report) never block the server's writes, and a
            # commit is an append rather than a rewrite; NORMAL sync survives a crash of the
            # process (only a power loss may drop the last few feedback rows)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"cannot open the release registry at {self.root} ({exc}); "
                              "pass --registry DIR with a writable folder") from exc
        self.lock = threading.Lock()

    def close(self) -> None:
        self.db.close()

    # -- adding ------------------------------------------------------------------------------
    def add(self, source: Path, name: str, variant: str | None = None) -> Release:
        """Record ``source`` (a run folder with report.json, or a variant folder) as ``name``."""
        if self._row(name) is not None:
            raise ConfigError(f"release {name!r} already exists and releases are immutable; "
                              "pick another name (infertune release list shows the taken ones)")
        folder, run, policy, scenario_yaml = _resolve_source(Path(source), variant)
        try:
            manifest = read_manifest(folder)
        except ModelLoadError as exc:
            raise ConfigError(f"cannot release {folder}: {exc}") from exc
        digest = tree_digest(folder)
        target = self.root / "artifacts" / digest
        if not target.is_dir():
            staging = self.root / "artifacts" / f".{digest}.tmp"
            shutil.rmtree(staging, ignore_errors=True)
            shutil.copytree(folder, staging)
            staging.rename(target)  # atomic: a half-copied folder never has the digest name
        report_sha = None
        if run is not None:
            report_sha = sha256_file(run.paths.report_json)
            shutil.copy2(run.paths.report_json, self.root / "reports" / f"{report_sha}.json")
        floor = None
        if scenario_yaml is not None and run is not None:
            floor = run.scenario().constraints.quality_floor
        try:
            record = ReleaseRecord(
                name=name, digest=digest, variant_id=manifest.id, created_at=time.time(),
                source=str(Path(source).resolve()),
                source_run=str(run.root.resolve()) if run else None,
                report_sha256=report_sha, policy=policy, scenario_yaml=scenario_yaml,
                quality_floor=floor, runtime=manifest.runtime, precision=manifest.precision,
                kind=manifest.kind, task=manifest.task,
                passes=[p.name for p in manifest.passes], preprocessing=manifest.preprocessing,
                libraries=manifest.libraries, source_model=manifest.source)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise ConfigError(f"release {'.'.join(map(str, err['loc']))}: {err['msg']} (names "
                              "are letters, digits, '.', '_' and '-', up to 64)") from exc
        with self.lock, self.db:
            self.db.execute("INSERT INTO releases VALUES (?, ?, ?, 'registered', NULL, ?)",
                            (name, record.model_dump_json(), record.created_at, record.created_at))
        self.log_event("add", name, f"variant {manifest.id}, digest {digest[:12]}")
        return self.get(name)

    # -- reading -----------------------------------------------------------------------------
    def _row(self, name: str) -> tuple[str, str, str | None, float] | None:
        with self.lock:
            row = self.db.execute("SELECT record, status, status_reason, status_time FROM "
                                  "releases WHERE name = ?", (name,)).fetchone()
        return None if row is None else (row[0], row[1], row[2], row[3])

    def get(self, name: str) -> Release:
        row = self._row(name)
        if row is None:
            known = ", ".join(r.record.name for r in self.releases()) or "none yet"
            raise ConfigError(f"no release named {name!r} in {self.root} (known: {known}); "
                              "add it with infertune release add RUN --name NAME")
        return _release(row)

    def releases(self) -> list[Release]:
        with self.lock:
            rows = self.db.execute("SELECT record, status, status_reason, status_time FROM "
                                   "releases ORDER BY created_at").fetchall()
        return [_release(r) for r in rows]

    def verified_path(self, name: str) -> Path:
        """The release's artifact folder after re-hashing it against its digest."""
        release = self.get(name)
        folder = self.root / "artifacts" / release.record.digest
        if not folder.is_dir():
            raise ConfigError(f"release {name!r}: artifact folder {folder} is missing (pruned "
                              "or deleted by hand); add the release again under a new name")
        if tree_digest(folder) != release.record.digest:
            raise ConfigError(f"release {name!r}: {folder} no longer matches its digest "
                              "(modified after release add); refusing to serve it; add the "
                              "variant again under a new name")
        return folder

    def diff(self, a: str, b: str) -> list[tuple[str, str, str]]:
        """(field, value in a, value in b) for every recorded field that differs."""
        left = self.get(a).record.model_dump(mode="json", exclude={"name", "created_at"})
        right = self.get(b).record.model_dump(mode="json", exclude={"name", "created_at"})
        rows = []
        for key in left:
            lv, rv = left[key], right[key]
            if isinstance(lv, dict) and isinstance(rv, dict):
                for sub in sorted(set(lv) | set(rv)):
                    if lv.get(sub) != rv.get(sub):
                        rows.append((f"{key}.{sub}", json.dumps(lv.get(sub)),
                                     json.dumps(rv.get(sub))))
            elif lv != rv:
                rows.append((key, json.dumps(lv), json.dumps(rv)))
        return rows

    # -- status and events ---------------------------------------------------------------
    def set_status(self, name: str, status: ReleaseStatus, reason: str | None = None) -> None:
        self.get(name)  # a clear error for an unknown name
        with self.lock, self.db:
            self.db.execute("UPDATE releases SET status = ?, status_reason = ?, status_time = ? "
                            "WHERE name = ?", (status, reason, time.time(), name))
        self.log_event(f"status:{status}", name, reason)

    def log_event(self, kind: str, release: str | None, reason: str | None = None,
                  state: str | None = None, when: float | None = None) -> None:
        with self.lock, self.db:
            self.db.execute("INSERT INTO events (time, kind, release, reason, state) VALUES "
                            "(?, ?, ?, ?, ?)", (when or time.time(), kind, release, reason, state))

    def events(self, release: str | None = None) -> list[EventRow]:
        query = "SELECT id, time, kind, release, reason, state FROM events"
        args: tuple[str, ...] = ()
        if release is not None:
            query, args = query + " WHERE release = ?", (release,)
        with self.lock:
            rows = self.db.execute(query + " ORDER BY id", args).fetchall()
        return [EventRow(id=r[0], time=r[1], kind=r[2], release=r[3], reason=r[4], state=r[5])
                for r in rows]

    def record_event(self, event: RoutingEvent) -> None:
        """The router's EventSink: log the change and move the statuses it implies."""
        state = event.state
        self.log_event(f"routing:{event.kind}", event.subject or state.stable, event.reason,
                       state.model_dump_json(), event.time)
        if event.kind == "start":
            self._move(state.stable, "stable", "serving as stable")
            if state.canary:
                self._move(state.canary, "canary", f"canary at {state.canary_weight:g}%")
        elif event.kind == "promote" and event.subject:
            self._move(event.subject, "stable", event.reason or "promoted")
            if state.previous_stable:
                self._move(state.previous_stable, "retired", f"replaced by {event.subject}")
        elif event.kind == "rollback" and event.subject:
            self._move(event.subject, "rolled_back", event.reason or "rolled back")
            if event.subject != state.stable:  # after a promotion: the previous one serves again
                self._move(state.stable, "stable", f"serving again after {event.subject}'s "
                           "rollback")
        elif event.kind == "canary" and event.subject:
            self._move(event.subject, "canary", f"canary at {state.canary_weight:g}%")
        elif event.kind == "shadow" and event.subject:
            self._move(event.subject, "shadow", "receiving mirrored traffic")

    def _move(self, name: str, status: ReleaseStatus, reason: str) -> None:
        if self._row(name) is not None:  # a server may host a release of another registry
            self.set_status(name, status, reason)

    # -- pruning -------------------------------------------------------------------------
    def prune(self, keep_retired: int = 1) -> list[str]:
        """Delete rolled-back releases and all but the newest ``keep_retired`` retired ones,
        and every artifact no remaining release uses. Returns the names removed."""
        releases = self.releases()
        retired = [r for r in releases if r.status == "retired"]
        retired.sort(key=lambda r: r.status_time, reverse=True)
        doomed = [r.record.name for r in releases if r.status == "rolled_back"]
        doomed += [r.record.name for r in retired[keep_retired:]]
        with self.lock, self.db:
            self.db.executemany("DELETE FROM releases WHERE name = ?", [(n,) for n in doomed])
        for name in doomed:
            self.log_event("prune", name, "removed by release prune")
        used = {r.record.digest for r in self.releases()}
        for folder in (self.root / "artifacts").iterdir():
            if folder.is_dir() and folder.name not in used:
                shutil.rmtree(folder)
        return doomed


def _release(row: tuple[str, str, str | None, float]) -> Release:
    return Release.model_validate({"record": ReleaseRecord.model_validate_json(row[0]),
                                   "status": row[1], "status_reason": row[2],
                                   "status_time": row[3]})


def _resolve_source(source: Path, variant: str | None
                    ) -> tuple[Path, RunDir | None, ServePolicy, str | None]:
    """(variant folder, run folder or None, serve policy, scenario YAML text or None)."""
    if (source / "manifest.json").is_file():
        if variant is not None:
            raise ConfigError(f"{source} is a variant folder; --variant applies to run folders")
        return source, None, ServePolicy(), None
    run = RunDir(source)
    report_path = run.paths.report_json
    if not run.exists_run():
        raise ConfigError(f"{source} is neither a run folder (with report.json) nor a variant "
                          "folder (with manifest.json); pass the folder infertune optimize wrote")
    report = run.report(Report)
    chosen = variant or (report.recommendation.variant_id if report.recommendation else None)
    try:
        policy = ServePolicy.model_validate(report.serving.policy if report.serving else {})
    except ValidationError as exc:
        raise ConfigError(f"{report_path}: cannot read its serving policy "
                          f"({type(exc).__name__}); rerun infertune optimize") from exc
    if chosen is None:
        raise ConfigError(f"{report_path} recommends no variant; pass --variant ID (a folder "
                          f"under {source}/variants)")
    folder = run.paths.variant(chosen)
    if not folder.is_dir():
        raise ConfigError(f"variant {chosen!r} not found under {source}/variants; pass "
                          "--variant with one of its folder names")
    scenario = run.paths.scenario  # kept as written: the registry stores the YAML text
    return folder, run, policy, scenario.read_text() if scenario.is_file() else None


def record_summary(release: Release) -> dict[str, object]:
    """The fields `release list` shows, as JSON values."""
    r = release.record
    return {"name": r.name, "status": release.status, "variant": r.variant_id,
            "runtime": r.runtime, "precision": r.precision, "digest": r.digest[:12],
            "created_at": r.created_at, "reason": release.status_reason,
            "preprocessing": asdict(r.preprocessing)}
