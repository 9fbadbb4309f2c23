"""What each stage of ``optimize`` found, one typed artifact per stage, and the run's findings
composed of them (``RunFindings``). The saved run (run.json, ``RunRecord`` in record.py) is
these artifacts nested under their stage's name, schema ``infertune.run/v2``:

    {"schema": "infertune.run/v2", "model": ..., "scenario": ...,      the run's own facts
     "log": {...}, "profiling": {...}, "build": {...}, "screen": {...},
     "sweep": {...}, "confirm": {...}, "models": {...}, "inputs": {...}}

Why one module on optimize's ground floor (beside state.py and record.py), not one class in
each stage module: the report builder, search/ (the recommendation, the builder) and the tests
read every stage's findings, and search/ may not import stages/ (docs/layout.md); a reader who
wants "what does the sweep save" finds all of them, and the cut between them, on one screen,
without importing the stages' measuring code (onnxruntime, the load generator).

Which stage returns which artifact (each stage's ``run(ctx)`` in stages/; run.py stores it):

    log        not returned: the one record every stage adds to (the RunState's): notes, what
               was skipped, seconds per stage, and the budget's bookkeeping (the cost facts
               setup/profile/build measure, --budget auto's choice, the estimate of a complete
               search)
    profiling  setup (the machine), completed by profile baseline (the baseline profile); each
               has its own file, hardware.json and profile.json, so run.json skips them
    build      build variants: every variant built or skipped (with its typed manifest), the
               baseline's id, the plan
    screen     screen variants, refined by confirm survivors: the ranked candidates
    sweep      serving policy: the finalists' sweeps, validations, curves, right-sizing
    confirm    serving policy, as served: the finalists confirmed over HTTP
    models     candidate models: each --candidate timed and judged, and their cascades
    inputs     input options: response cache, trimming, length bucketing

**Adding a measured field is one edit**: a field (with a default) on the artifact of the stage
that measures it, e.g. ``warm_p99_ms: float | None = None`` on ``SweepArtifact``. ``Serial``
writes it to run.json and reads it back, ``RunRecord`` carries it (it holds the artifacts), and
a run.json written before it loads with the default. A reader reads it as
``record.sweep.warm_p99_ms``.

The v1 run.json (every finding flat at the top level) is read through ``v1_to_v2``, which puts
each flat key under the stage whose artifact has that field; the mapping is built from the
classes below, so it needs no edit either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from infertune.hardware import HardwareInfo
from infertune.measure.curve import ServiceCurve
from infertune.measure.profile import Profile
from infertune.models.variant import Manifest
from infertune.optimize.search.costs import BudgetChoice, BudgetEstimate, CostFacts
from infertune.optimize.search.ordering import SearchPlan
from infertune.optimize.search.timing import Candidate, Skipped
from infertune.optimize.served.cascade_eval import CascadeResult, RightSizing
from infertune.optimize.served.confirm import Confirmation
from infertune.optimize.served.input_options import InputOptions
from infertune.optimize.served.policy_sweep import SweepResult
from infertune.optimize.served.traffic import Validation
from infertune.serial import Serial, decode_fields

SKIP = {"skip": True}


@dataclass
class BuiltVariant(Serial):
    variant_id: str
    path: Path | None
    title: str
    skipped: str | None = None  # why the pass did not build
    is_baseline: bool = False
    manifest: Manifest | None = None  # the variant's manifest.json (None: it did not build)
    build_s: float | None = None  # measured seconds its pass took (build + check)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BuiltVariant:
        # a run.json written while the manifest was an untyped dict has {} for a variant that
        # did not build; a built one's dict is the Manifest's own and reads as one
        if data.get("manifest") == {}:
            data = {**data, "manifest": None}
        return decode_fields(cls, data)


@dataclass(frozen=True)
class LoadCurve(Serial):
    """p99 against offered load for one serving policy, from the queueing simulator."""

    policy_id: str
    points: list[tuple[float, float]]  # (requests/s, p99 ms)


@dataclass(kw_only=True)
class RunLog(Serial):
    """What every stage adds to: notes, what it skipped (and what it would have needed), its
    seconds, and the budget's bookkeeping."""

    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    cost_facts: CostFacts | None = None  # measured times the step costs are scaled from
    budget_choice: BudgetChoice | None = None  # what --budget auto chose, and why
    budget_estimate: BudgetEstimate | None = None  # what a complete search would need


@dataclass(kw_only=True)
class ProfileArtifact(Serial):
    """Setup and profile baseline: the machine and the baseline's profile."""

    hardware: HardwareInfo | None = field(default=None, metadata=SKIP)  # hardware.json
    hardware_label: str = ""
    profile: Profile | None = field(default=None, metadata=SKIP)  # profile.json


@dataclass(kw_only=True)
class BuildArtifact(Serial):
    """Build variants: each planned variant, built or skipped, and the order they were built in."""

    built: list[BuiltVariant] = field(default_factory=list)
    baseline_variant_id: str | None = None
    search_plan: SearchPlan | None = None  # the build order by expected gain per second

    def built_variant(self, variant_id: str) -> BuiltVariant | None:
        return next((b for b in self.built if b.variant_id == variant_id), None)


@dataclass(kw_only=True)
class ScreenArtifact(Serial):
    """Screen variants and confirm survivors: every candidate with its timings and quality."""

    candidates: list[Candidate] = field(default_factory=list)


@dataclass(kw_only=True)
class SweepArtifact(Serial):
    """Serving policy: the finalists' policy sweeps measured through the serving runtime."""

    sweep: SweepResult | None = None  # the winning finalist's sweep
    finalist_sweeps: list[SweepResult] = field(default_factory=list)  # every finalist's
    validations: dict[str, Validation] = field(default_factory=dict)
    curve: ServiceCurve | None = None
    load_curves: list[LoadCurve] = field(default_factory=list)
    right_sizing: RightSizing | None = None


@dataclass(kw_only=True)
class ConfirmArtifact(Serial):
    """The finalists confirmed as served (own process, over HTTP)."""

    confirmation: Confirmation | None = None


@dataclass(kw_only=True)
class ModelsArtifact(Serial):
    """Candidate models: each --candidate timed and judged, and tried as a cascade."""

    candidate_models: list[Candidate] = field(default_factory=list)
    cascades: list[CascadeResult] = field(default_factory=list)


@dataclass(kw_only=True)
class InputsArtifact(Serial):
    """Input options: the response-cache estimate, input trimming and length bucketing."""

    input_options: InputOptions | None = None


@dataclass(kw_only=True)
class RunFindings(Serial):
    """What a run measured and decided: one artifact per stage. The live ``RunState``
    (state.py) holds them while the stages run, and the saved ``RunRecord`` (record.py) is them
    (plus the run's own facts)."""

    log: RunLog = field(default_factory=RunLog)
    profiling: ProfileArtifact = field(default_factory=ProfileArtifact)
    build: BuildArtifact = field(default_factory=BuildArtifact)
    screen: ScreenArtifact = field(default_factory=ScreenArtifact)
    sweep: SweepArtifact = field(default_factory=SweepArtifact)
    confirm: ConfirmArtifact = field(default_factory=ConfirmArtifact)
    models: ModelsArtifact = field(default_factory=ModelsArtifact)
    inputs: InputsArtifact = field(default_factory=InputsArtifact)

    def findings(self) -> dict[str, Any]:
        """The stage artifacts by name, to build another run view from (shared, not copied:
        the run is over when the record is made)."""
        return {f.name: getattr(self, f.name) for f in fields(RunFindings)}


_STAGES: dict[str, type[Serial]] = {
    "log": RunLog, "profiling": ProfileArtifact, "build": BuildArtifact,
    "screen": ScreenArtifact, "sweep": SweepArtifact, "confirm": ConfirmArtifact,
    "models": ModelsArtifact, "inputs": InputsArtifact}
assert set(_STAGES) == {f.name for f in fields(RunFindings)}, "a stage missing from _STAGES"


def _stage_of_key() -> dict[str, str]:
    return {f.name: stage for stage, cls in _STAGES.items() for f in fields(cls)}  # type: ignore[arg-type]


def by_stage(**findings: Any) -> dict[str, Any]:
    """Findings named by field, as the stage artifacts that hold them, for building a run view
    in a few words: ``RunRecord(model=..., **by_stage(notes=["n"], sweep=result))``."""
    stage_of = _stage_of_key()
    unknown = sorted(set(findings) - set(stage_of))
    if unknown:
        raise TypeError(f"no stage artifact has the field(s) {unknown}")
    grouped: dict[str, dict[str, Any]] = {}
    for key, value in findings.items():
        grouped.setdefault(stage_of[key], {})[key] = value
    return {stage: _STAGES[stage](**kw) for stage, kw in grouped.items()}


RUN_V1 = "infertune.run/v1"  # the findings flat at the top level of run.json


def as_v2(data: Mapping[str, Any]) -> dict[str, Any]:
    """run.json's content with v2's keys, whichever version wrote it (the benchmarks read
    run.json by key through this)."""
    return v1_to_v2(data) if data.get("schema") == RUN_V1 else dict(data)


def v1_to_v2(data: Mapping[str, Any]) -> dict[str, Any]:
    """A v1 run.json (findings flat at the top level) as v2's keys: each finding under its
    stage. Keys no artifact knows (the run's own facts) stay at the top level."""
    stage_of = _stage_of_key()
    out: dict[str, Any] = {}
    for key, value in data.items():
        stage = stage_of.get(key)
        if stage is None:
            out[key] = value
        else:
            out.setdefault(stage, {})[key] = value
    out["schema"] = "infertune.run/v2"
    return out
