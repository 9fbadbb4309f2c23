"""RunRecord: what a run measured and decided, as the typed artifact the report builder reads.

The stages work on the live RunState (adapters, held-out inputs, reference outputs); when they
are done, ``RunRecord.from_state`` keeps what the report and the decision need and
``save`` writes it beside the run's other artifacts:

    run.json        this record: the run's own facts (model, scenario, ...), then one artifact
                    per stage under its name (findings.py: log, profiling, build,
                    screen, sweep, confirm, models, inputs); schema infertune.run/v2
    profile.json    the baseline profile (the record's ``profiling.profile``)
    hardware.json   the machine (the record's ``profiling.hardware``)

A v1 run.json (the findings flat at the top level) is read by moving each finding under its
stage (``v1_to_v2``); any other schema, or a newer version, is refused in one line naming it.

``RunRecord.load(run_dir)`` reads them back, so a run directory can be re-reported without
the process that measured it (``report/run_report.py`` builds report.json from a record).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from infertune.artifacts import RunDir, schema_version
from infertune.config import Scenario
from infertune.errors import ConfigError
from infertune.hardware import HardwareInfo
from infertune.jsonfile import write_json
from infertune.measure.profile import Profile
from infertune.optimize.findings import RUN_V1, RunFindings, v1_to_v2
from infertune.optimize.state import RunPaths, RunState
from infertune.serial import decode_fields, encode_fields

RECORD_SCHEMA = "infertune.run/v2"


@dataclass(kw_only=True)
class RunRecord(RunFindings):
    """The saved run: its findings (one artifact per stage, RunFindings in findings.py)
    and the facts of the run the report names."""

    model: str
    scenario: Scenario
    data_source: str
    quick: bool
    task: str  # the baseline's task (the quality metrics and the floor follow it)
    baseline_runtime: str
    quality_count: int  # held-out inputs the quality verdicts were judged on

    @classmethod
    def from_state(cls, state: RunState) -> RunRecord:
        opts = state.options
        return cls(model=opts.model, scenario=opts.scenario, data_source=opts.data.source,
                   quick=opts.quick, task=state.task,
                   baseline_runtime=state.baseline.info.runtime,
                   quality_count=len(state.quality_inputs), **state.findings())

    # Kept by hand, and why: run.json names its schema, which is checked on reading, and
    # the hardware and the profile are read from their own files
    def to_dict(self) -> dict[str, Any]:
        """run.json's content: the schema id, the run's own facts, then each stage's artifact
        (without the profile and the hardware, which have their own files)."""
        data = encode_fields(self)
        # the run's own facts first, then the stages' artifacts
        own = {f.name: data.pop(f.name) for f in fields(RunRecord) if f.name in _OWN}
        return {"schema": RECORD_SCHEMA, **own, **data}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, hardware: HardwareInfo | None = None,
                  profile: Profile | None = None) -> RunRecord:
        if data.get("schema") == RUN_V1:  # findings flat: each under its stage
            data = v1_to_v2(data)
        elif data.get("schema") != RECORD_SCHEMA:
            raise ConfigError(f"run.json has schema {data.get('schema')!r}, not "
                              f"{RECORD_SCHEMA!r}; re-run infertune optimize with this version")
        record = decode_fields(cls, data)
        record.profiling.hardware, record.profiling.profile = hardware, profile
        return record

    def save(self, paths: RunPaths) -> None:
        write_json(paths.run_json, self.to_dict())
        if self.profiling.hardware is not None:
            write_json(paths.hardware, self.profiling.hardware.to_dict())
        if self.profiling.profile is not None:
            write_json(paths.profile, self.profiling.profile.to_dict())

    @classmethod
    def load(cls, root: Path) -> RunRecord:
        run = RunDir(root)
        paths = run.paths
        if not paths.run_json.is_file():
            raise ConfigError(f"{paths.run_json} not found: {root} is not an optimize run "
                              "directory (or the run did not finish); run infertune optimize")
        hardware = run.hardware() if paths.hardware.is_file() else None
        profile = run.profile() if paths.profile.is_file() else None
        data = run.read(paths.run_json, fix="the run directory is damaged, re-run infertune "
                        "optimize")
        schema_version(data, paths.run_json, RECORD_SCHEMA)  # another or a newer: one line
        return cls.from_dict(data, hardware=hardware, profile=profile)


_OWN = {f.name for f in fields(RunRecord)} - {f.name for f in fields(RunFindings)}
