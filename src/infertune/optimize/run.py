"""The run directory (DESIGN.md) and ``optimize(...)``: the whole job in stage order.

    runs/<name>/
      scenario.yaml          what the user told us (and what we detected, under `detected`)
      hardware.json          hardware.detect()
      profile.json           the baseline profile (stages, curve, hotspots...)
      variants/<id>/         manifest.json (+ model files), latency.json, quality.json
      serving.json           the policy sweep, validations, batching effects
      extras.json            inputs/caching options, candidates and cascades, right-sizing
      report.json            schema infertune.report/v1 (+ "serving": {"policy": ...})
      report.md, report.html, plots/

Stages (each one checks the budget before it starts; see search.py):
    setup -> profile baseline -> reference outputs -> build variants -> screen (quick timing +
    quality) -> confirm survivors (interleaved) -> serving sweep + validation -> candidates /
    cascade -> input options -> report
The stage bodies live in steps.py; this module holds the paths and the order.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infertune.config import Scenario
from infertune.data import HeldOut
from infertune.optimize.search import Budget, Candidate, NullProgress, Progress, Skipped

DEFAULT_BUDGET_S = 330.0  # 5.5 minutes: the demo must finish in < 10 on 2 cores
QUICK_BUDGET_S = 90.0


@dataclass(frozen=True)
class RunPaths:
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

    @property
    def serving(self) -> Path:
        return self.root / "serving.json"

    @property
    def extras(self) -> Path:
        return self.root / "extras.json"

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


def write_json(path: Path, payload: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return path


def write_scenario(paths: RunPaths, scenario: Scenario, detected: dict[str, Any]) -> None:
    """The user's scenario as given, plus what we detected, in one YAML file."""
    data = scenario.to_dict()
    text = yaml.safe_dump(data, sort_keys=False)
    text += "# detected on this machine by infertune optimize (not part of the scenario):\n"
    text += "\n".join("# " + line
                      for line in yaml.safe_dump({"detected": detected},
                                                 sort_keys=False).splitlines())
    paths.scenario.write_text(text + "\n")


@dataclass
class OptimizeOptions:
    model: str
    scenario: Scenario
    data: HeldOut
    out: Path
    budget_s: float = DEFAULT_BUDGET_S
    quick: bool = False
    candidates: list[str] = field(default_factory=list)
    seed: int = 0
    scenario_source: str = ""


@dataclass
class RunState:
    """Everything a run measured or decided; report assembly reads only this."""

    options: OptimizeOptions
    paths: RunPaths
    hardware: Any = None  # HardwareInfo
    hardware_label: str = ""
    baseline: Any = None  # Adapter
    profile: Any = None  # measure.profile.Profile
    reference: Any = None  # baseline outputs on the quality subset (np.ndarray)
    quality_inputs: list[Any] = field(default_factory=list)
    requests: list[list[Any]] = field(default_factory=list)  # batch-1 timing requests
    base_samples: list[float] = field(default_factory=list)  # baseline ms on those requests
    built: list[Any] = field(default_factory=list)  # BuiltVariant
    candidates: list[Candidate] = field(default_factory=list)
    adapters: dict[str, Any] = field(default_factory=dict)  # variant id -> Adapter
    sweep: Any = None  # SweepResult
    validations: dict[str, Any] = field(default_factory=dict)
    contention: Any = None
    curve: Any = None
    input_options: Any = None  # InputOptions
    cascades: list[Any] = field(default_factory=list)
    candidate_models: list[Candidate] = field(default_factory=list)
    right_sizing: Any = None
    load_curves: list[Any] = field(default_factory=list)  # report Series: p99 against load
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    baseline_variant_id: str | None = None

    def skip(self, what: str, reason: str, need_s: float | None = None) -> None:
        self.skipped.append(Skipped(what, reason, need_s))


@dataclass
class RunOutcome:
    paths: RunPaths
    report: dict[str, Any]
    state: RunState


Step = Callable[[RunState, Budget, Progress], None]


def optimize(options: OptimizeOptions, *, progress: Progress | None = None,
             builder: Any = None, clock: Callable[[], float] = time.monotonic) -> RunOutcome:
    """Run the whole search into ``options.out`` and write the report; see module docstring."""
    from infertune.optimize import steps
    from infertune.optimize.runreport import build_report, write_reports

    progress = progress or NullProgress()
    paths = RunPaths(Path(options.out))
    state = RunState(options=options, paths=paths)
    progress.tick(f"loading {options.model}")
    # a bad reference or a floor that does not fit the model fails before the run dir exists
    state.baseline = steps.load_baseline(options)
    steps.check_floor(state)
    paths.create()
    budget = Budget(options.budget_s, clock=clock)
    order: Sequence[tuple[str, Step]] = [
        ("setup", steps.setup),
        ("profile baseline", steps.profile_baseline),
        ("reference outputs", steps.reference_outputs),
        ("build variants", lambda s, b, p: steps.build(s, b, p, builder)),
        ("screen variants", steps.screen),
        ("confirm survivors", steps.confirm),
        ("serving policy", steps.serving),
        ("candidate models", steps.candidate_models),
        ("input options", steps.input_options),
    ]
    for name, step in order:
        progress.stage(name, f"{budget.left():.0f} s left")
        started = clock()
        step(state, budget, progress)
        state.stage_seconds[name] = clock() - started
    progress.stage("report", "writing report.json, report.md, report.html")
    report = build_report(state)
    write_reports(state, report)
    return RunOutcome(paths, report, state)
