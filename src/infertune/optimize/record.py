"""RunRecord: what a run measured and decided, as the typed artifact the report builder reads.

The stages work on the live RunState (adapters, held-out inputs, reference outputs); when they
are done, ``RunRecord.from_state`` keeps what the report and the decision need and
``save`` writes it beside the run's other artifacts:

    run.json        this record (scenario, candidates, sweep, validations, notes, ...)
    profile.json    the baseline profile (the record's ``profile``)
    hardware.json   the machine (the record's ``hardware``)

``RunRecord.load(run_dir)`` reads them back, so a run directory can be re-reported without
the process that measured it (``report/run_report.py`` builds report.json from a record).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from infertune.config import Scenario
from infertune.errors import ConfigError
from infertune.hardware import HardwareInfo
from infertune.jsonfile import read_json, write_json
from infertune.measure.curve import ServiceCurve
from infertune.measure.profile import Profile
from infertune.optimize.cascade import CascadeResult, RightSizing
from infertune.optimize.confirm_served import Confirmation
from infertune.optimize.costs import BudgetChoice, BudgetEstimate, CostFacts
from infertune.optimize.inputs import InputOptions
from infertune.optimize.ordering import SearchPlan
from infertune.optimize.search import Candidate, Skipped
from infertune.optimize.serving import Validation
from infertune.optimize.state import BuiltVariant, LoadCurve, RunPaths, RunState
from infertune.optimize.sweep import SweepResult

RECORD_SCHEMA = "infertune.run/v1"
T = TypeVar("T")


@dataclass
class RunRecord:
    model: str
    scenario: Scenario
    data_source: str
    quick: bool
    task: str  # the baseline's task (the quality metrics and the floor follow it)
    baseline_runtime: str
    quality_count: int  # held-out inputs the quality verdicts were judged on
    hardware_label: str = ""
    hardware: HardwareInfo | None = None
    profile: Profile | None = None
    baseline_variant_id: str | None = None
    built: list[BuiltVariant] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)
    candidate_models: list[Candidate] = field(default_factory=list)
    sweep: SweepResult | None = None  # the winning finalist's
    finalist_sweeps: list[SweepResult] = field(default_factory=list)
    validations: dict[str, Validation] = field(default_factory=dict)
    curve: ServiceCurve | None = None
    input_options: InputOptions | None = None
    cascades: list[CascadeResult] = field(default_factory=list)
    right_sizing: RightSizing | None = None
    load_curves: list[LoadCurve] = field(default_factory=list)
    confirmation: Confirmation | None = None  # finalists as served (own process)
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    cost_facts: CostFacts | None = None
    search_plan: SearchPlan | None = None
    budget_choice: BudgetChoice | None = None
    budget_estimate: BudgetEstimate | None = None

    def built_variant(self, variant_id: str) -> BuiltVariant | None:
        return next((b for b in self.built if b.variant_id == variant_id), None)

    @classmethod
    def from_state(cls, state: RunState) -> RunRecord:
        opts = state.options
        return cls(
            model=opts.model, scenario=opts.scenario, data_source=opts.data.source,
            quick=opts.quick, task=state.task, baseline_runtime=state.baseline.info.runtime,
            quality_count=len(state.quality_inputs), hardware_label=state.hardware_label,
            hardware=state.hardware, profile=state.profile,
            baseline_variant_id=state.baseline_variant_id, built=list(state.built),
            candidates=list(state.candidates), candidate_models=list(state.candidate_models),
            sweep=state.sweep, finalist_sweeps=list(state.finalist_sweeps),
            validations=dict(state.validations), curve=state.curve,
            input_options=state.input_options, cascades=list(state.cascades),
            right_sizing=state.right_sizing, load_curves=list(state.load_curves),
            confirmation=state.confirmation,
            skipped=list(state.skipped), notes=list(state.notes),
            stage_seconds=dict(state.stage_seconds), cost_facts=state.cost_facts,
            search_plan=state.search_plan, budget_choice=state.budget_choice,
            budget_estimate=state.budget_estimate)

    def to_dict(self) -> dict[str, Any]:
        """run.json's content: everything but the profile and the hardware, which have their
        own files."""
        return {
            "schema": RECORD_SCHEMA, "model": self.model, "scenario": self.scenario.to_dict(),
            "data_source": self.data_source, "quick": self.quick, "task": self.task,
            "baseline_runtime": self.baseline_runtime, "quality_count": self.quality_count,
            "hardware_label": self.hardware_label,
            "baseline_variant_id": self.baseline_variant_id,
            "built": [{**asdict(b), "path": str(b.path) if b.path else None}
                      for b in self.built],
            "candidates": [c.to_dict() for c in self.candidates],
            "candidate_models": [c.to_dict() for c in self.candidate_models],
            "sweep": self.sweep.to_dict() if self.sweep else None,
            "finalist_sweeps": [s.to_dict() for s in self.finalist_sweeps],
            "validations": {k: v.to_dict() for k, v in self.validations.items()},
            "curve": self.curve.to_dict() if self.curve else None,
            "input_options": self.input_options.to_dict() if self.input_options else None,
            "cascades": [c.to_dict() for c in self.cascades],
            "right_sizing": self.right_sizing.to_dict() if self.right_sizing else None,
            "load_curves": [c.to_dict() for c in self.load_curves],
            "confirmation": self.confirmation.to_dict() if self.confirmation else None,
            "skipped": [s.to_dict() for s in self.skipped],
            "notes": list(self.notes), "stage_seconds": dict(self.stage_seconds),
            "cost_facts": self.cost_facts.to_dict() if self.cost_facts else None,
            "search_plan": self.search_plan.to_dict() if self.search_plan else None,
            "budget_choice": self.budget_choice.to_dict() if self.budget_choice else None,
            "budget_estimate": (self.budget_estimate.to_dict() if self.budget_estimate
                                else None)}

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, hardware: HardwareInfo | None = None,
                  profile: Profile | None = None) -> RunRecord:
        if data.get("schema") != RECORD_SCHEMA:
            raise ConfigError(f"run.json has schema {data.get('schema')!r}, not "
                              f"{RECORD_SCHEMA!r}; re-run infertune optimize with this version")
        return cls(
            model=data["model"], scenario=Scenario.from_dict(data["scenario"], source="run.json"),
            data_source=data["data_source"], quick=data["quick"], task=data["task"],
            baseline_runtime=data["baseline_runtime"], quality_count=data["quality_count"],
            hardware_label=data["hardware_label"], hardware=hardware, profile=profile,
            baseline_variant_id=data["baseline_variant_id"],
            built=[BuiltVariant(**{**b, "path": Path(b["path"]) if b["path"] else None})
                   for b in data["built"]],
            candidates=[Candidate.from_dict(c) for c in data["candidates"]],
            candidate_models=[Candidate.from_dict(c) for c in data["candidate_models"]],
            sweep=SweepResult.from_dict(data["sweep"]) if data["sweep"] else None,
            finalist_sweeps=[SweepResult.from_dict(s) for s in data["finalist_sweeps"]],
            validations={k: Validation.from_dict(v) for k, v in data["validations"].items()},
            curve=ServiceCurve.from_dict(data["curve"]) if data["curve"] else None,
            input_options=(InputOptions.from_dict(data["input_options"])
                           if data["input_options"] else None),
            cascades=[CascadeResult.from_dict(c) for c in data["cascades"]],
            right_sizing=(RightSizing.from_dict(data["right_sizing"])
                          if data["right_sizing"] else None),
            load_curves=[LoadCurve.from_dict(c) for c in data["load_curves"]],
            confirmation=(Confirmation.from_dict(data["confirmation"])
                          if data.get("confirmation") else None),
            skipped=[Skipped.from_dict(s) for s in data["skipped"]],
            notes=list(data["notes"]), stage_seconds=dict(data["stage_seconds"]),
            cost_facts=_opt(CostFacts.from_dict, data.get("cost_facts")),
            search_plan=_opt(SearchPlan.from_dict, data.get("search_plan")),
            budget_choice=_opt(BudgetChoice.from_dict, data.get("budget_choice")),
            budget_estimate=_opt(BudgetEstimate.from_dict, data.get("budget_estimate")))

    def save(self, paths: RunPaths) -> None:
        write_json(paths.run_json, self.to_dict())
        if self.hardware is not None:
            write_json(paths.hardware, self.hardware.to_dict())
        if self.profile is not None:
            write_json(paths.profile, self.profile.to_dict())

    @classmethod
    def load(cls, root: Path) -> RunRecord:
        paths = RunPaths(Path(root))
        if not paths.run_json.is_file():
            raise ConfigError(f"{paths.run_json} not found: {root} is not an optimize run "
                              "directory (or the run did not finish); run infertune optimize")
        hardware = (HardwareInfo.from_dict(_read(paths.hardware))
                    if paths.hardware.is_file() else None)
        profile = Profile.from_dict(_read(paths.profile)) if paths.profile.is_file() else None
        return cls.from_dict(_read(paths.run_json), hardware=hardware, profile=profile)


def _opt(make: Callable[[dict[str, Any]], T], data: dict[str, Any] | None) -> T | None:
    """``make(data)``, or None for a field an older run.json does not have."""
    return make(data) if data else None


def _read(path: Path) -> dict[str, Any]:
    data = read_json(path, fix="the run directory is damaged, re-run infertune optimize")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object; re-run infertune optimize")
    return data
