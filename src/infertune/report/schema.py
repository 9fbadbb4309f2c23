"""The report model, schema ``infertune.report/v1``: what `advise` and `optimize` write to
report.json and what every renderer reads (renderers never recompute a figure).

Every number in a report lives inside a value that carries its provenance:

- ``Figure``: one value or a low/high range, its unit, ``source`` ("measured" | "estimate") and
  ``basis`` ("measured on <hardware> with N samples" / "estimate from <reference>").
- ``Series``: a list of (x, y) points for a plot, with the same provenance fields.

The only other numbers allowed are configuration knobs under a ``settings`` key (inputs we chose,
e.g. a serving policy's max batch size), never results. ``provenance.py`` checks this.

Layout of a Report (sections optimize fills are optional; advise leaves them empty)::

    Report
     ├── problem: Problem               one-sentence restatement, latency/throughput/cost goals
     ├── missing_facts: [MissingFact]   facts the scenario did not state, what each would change
     ├── assumptions: [str]             the stated assumptions used instead
     ├── diagnosis: Diagnosis           where the time goes, p50 vs p99, queueing vs compute
     ├── options: [Option]              ranked rows (impact Figures, effort, risk, verify, ...)
     ├── first_week: [PlanStep]         exactly three steps
     ├── measurement_plan: MeasurementPlan
     ├── guardrails: [str]
     ├── variants / policies / plots    measured sections (optimize)
     └── recommendation: Recommendation | None
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from infertune.errors import ConfigError
from infertune.jsonfile import read_json, write_json

SCHEMA = "infertune.report/v1"

Source = Literal["measured", "estimate"]
Level = Literal["low", "medium", "high"]
Verdict = Literal["pass", "fail", "unknown"]

# the ``artifact`` of a figure `advise --measure` measured: it writes no run folder, so there is
# no file to name (report/provenance.py accepts this one label beside relative paths)
IN_PROCESS_ARTIFACT = "advise --measure (measured in this process; not saved)"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # pydantic's own dump and validate under the names Serial and the report builders use:
    # report.json leaves out what was not measured (None) rather than writing nulls
    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        return cls.model_validate(data)


class Figure(_Model):
    """One figure with its unit and provenance: either ``value`` or a ``low``..``high`` range."""

    value: float | None = None
    low: float | None = None
    high: float | None = None
    unit: str
    source: Source
    basis: str = Field(min_length=1)
    samples: int | None = Field(default=None, ge=1)
    # the run artifact that holds the observations, relative to the run folder (e.g.
    # "confirm/confirmation.json"; report/figure_sources.py names them), and the figures a derived
    # value was computed from: report/provenance.py checks that a figure labelled measured
    # names its artifact and derives from no estimate
    artifact: str | None = None
    inputs: list[Figure] = Field(default_factory=list)

    @model_validator(mode="after")
    def _value_or_range(self) -> Figure:
        has_range = self.low is not None and self.high is not None
        has_any_bound = self.low is not None or self.high is not None
        if not ((self.value is not None and not has_any_bound)
                or (self.value is None and has_range)):
            raise ValueError("a Figure has either 'value' or both 'low' and 'high'")
        if has_range and self.low > self.high:  # type: ignore[operator]
            raise ValueError(f"Figure low ({self.low}) is above high ({self.high})")
        return self

    @classmethod
    def measured(cls, value: float, unit: str, hardware: str, samples: int,
                 what: str = "", *, artifact: str,
                 inputs: list[Figure] | None = None) -> Figure:
        """A figure measured by infertune on ``hardware`` from ``samples`` observations held
        in ``artifact`` (relative to the run folder); ``inputs``: the measured figures it was
        computed from, when it is a ratio or a rate derived from them."""
        lead = f"{what}, measured" if what else "measured"
        return cls(value=value, unit=unit, source="measured", samples=samples,
                   basis=f"{lead} on {hardware} with {samples} samples", artifact=artifact,
                   inputs=list(inputs or []))

    @classmethod
    def estimate(cls, low: float, high: float, unit: str, reference: str) -> Figure:
        """A range estimated from ``reference`` (a published figure, a formula, a stated fact)."""
        return cls(low=low, high=high, unit=unit, source="estimate",
                   basis=f"estimate from {reference}")

    @property
    def mid(self) -> float:
        """The value, or the middle of the range (for ranking only, never for display)."""
        if self.value is not None:
            return self.value
        return (self.low + self.high) / 2  # type: ignore[operator]


class Series(_Model):
    """Plot points (x, y) with their units and provenance."""

    label: str
    x_unit: str
    y_unit: str
    points: list[tuple[float, float]]
    source: Source
    basis: str = Field(min_length=1)
    artifact: str | None = None  # as Figure.artifact: where measured points were measured


class Problem(_Model):
    statement: str
    latency_goal: str
    throughput_goal: str
    cost_goal: str
    inside_slo: bool | None = None


class MissingFact(_Model):
    fact: str
    would_change: str
    assumption: str


class DiagnosisItem(_Model):
    """One place the time may go: a stage (tokenisation, forward pass, queueing...)."""

    stage: str
    likelihood: Literal["dominant", "significant", "minor", "unknown"]
    reason: str
    time: Figure | None = None
    share: Figure | None = None


class Diagnosis(_Model):
    summary: str
    items: list[DiagnosisItem] = Field(default_factory=list)
    figures: dict[str, Figure] = Field(default_factory=dict)
    queueing_vs_compute: str = ""
    p50_vs_p99: str = ""


class Rated(_Model):
    level: Level
    reason: str


class Impact(_Model):
    """Change each option makes: negative latency deltas are gains; throughput and cost are
    relative changes too. Any field may be absent when nothing is known about it."""

    p50: Figure | None = None
    p95: Figure | None = None
    p99: Figure | None = None
    throughput: Figure | None = None
    cost: Figure | None = None


class Option(_Model):
    id: str
    title: str
    category: str = ""
    impact: Impact
    effort: Rated
    risk: Rated
    verify: str
    invalidated_by: str = ""
    applicability: str = ""
    source: Source
    within_risk_budget: bool = True
    sources: list[str] = Field(default_factory=list)


class PlanStep(_Model):
    title: str
    detail: str


class MeasurementPlan(_Model):
    log_per_stage: list[str]
    compare_variants: str
    quality_and_drift: str
    measure_with: str | None = None  # the infertune command that measures this advice


class Percentiles(_Model):
    p50: Figure | None = None
    p95: Figure | None = None
    p99: Figure | None = None


class VariantRow(_Model):
    variant_id: str
    title: str = ""
    latency: Percentiles
    throughput: Figure | None = None
    quality: Figure | None = None
    quality_metric: str = ""
    quality_verdict: Verdict = "unknown"
    notes: str = ""


class PolicyRow(_Model):
    policy_id: str
    variant_id: str
    settings: dict[str, float | int | str | None] = Field(default_factory=dict)
    at_mean: Percentiles = Field(default_factory=Percentiles)
    at_peak: Percentiles = Field(default_factory=Percentiles)
    goodput: Figure | None = None
    cost_per_1k: Figure | None = None
    meets_slo: bool | None = None


class StageTime(_Model):
    stage: str
    time: Figure


class StageGroup(_Model):
    label: str
    stages: list[StageTime]


class QualitySpeedPoint(_Model):
    label: str
    speed: Figure
    quality: Figure
    on_front: bool = False


class PlotData(_Model):
    latency_cdf: list[Series] = Field(default_factory=list)
    stage_breakdown: list[StageGroup] = Field(default_factory=list)
    p99_vs_load: list[Series] = Field(default_factory=list)
    quality_vs_speed: list[QualitySpeedPoint] = Field(default_factory=list)

    def is_empty(self) -> bool:
        return not (self.latency_cdf or self.stage_breakdown or self.p99_vs_load
                    or self.quality_vs_speed)


class Recommendation(_Model):
    variant_id: str | None = None
    option_id: str | None = None
    policy_id: str | None = None
    title: str = ""
    reason: str = ""


class Serving(_Model):
    """The serving policy optimize chose, in the form serve/ loads (``policy`` is a ServePolicy
    dict: configuration we chose, exempt from the provenance rule like ``settings``).
    Added by the optimize stage (issue 7): serve reads report["serving"]["policy"]."""

    variant_id: str | None = None
    policy_id: str | None = None
    policy: dict[str, float | int | str | bool | None] = Field(default_factory=dict)
    why: str = ""


TargetVerdict = Literal["meets", "misses", "not shown"]


class PercentileCheck(_Model):
    """One SLO percentile at one rate against its target: the measured value with its
    interval at ``confidence`` (measure/tail_interval.py; ``high`` None: no upper bound, too few
    answers in the tail) and the verdict it allows: meets only wholly below, misses only wholly
    above."""

    key: str  # "p95"
    target_ms: float
    value: float
    low: float | None = None
    high: float | None = None
    # 0.975 when the confirmation may look twice (confirm_sizing.LOOK_CONFIDENCE); reports
    # before it was recorded were all 95%
    confidence: float = Field(default=0.95, gt=0, lt=1)
    samples: int = Field(ge=1)
    blocks: int = Field(ge=0)
    block_s: float
    verdict: TargetVerdict
    why: str
    source: Source = "measured"
    basis: str = Field(min_length=1)
    artifact: str | None = None


class SloPoint(_Model):
    """The recommended configuration load-tested at one rate of the scenario's traffic, through
    serve's own runtime, with the queueing simulator's prediction for the same rate beside it."""

    label: str  # "mean" or "peak"
    offered: Figure  # the rate the schedule was built for
    achieved: Figure | None = None
    measured: Percentiles = Field(default_factory=Percentiles)
    predicted: Percentiles = Field(default_factory=Percentiles)
    shed: Figure | None = None  # share of requests refused, shed or failed
    meets_slo: bool | None = None  # True: verdict "meets"; False: "misses"; None otherwise
    verdict: TargetVerdict | None = None  # None: not measured
    checks: list[PercentileCheck] = Field(default_factory=list)
    decisive_run: str | None = None  # when "not shown": the run that would decide it
    goodput: Figure | None = None  # requests/s served within the SLO at this rate
    cost_per_1k: Figure | None = None  # from the measured goodput


class SloCheck(_Model):
    """Does the recommended configuration meet the SLO here, measured? And if not, what would."""

    variant_id: str | None = None
    policy_id: str | None = None
    targets: dict[str, float] = Field(default_factory=dict)  # the SLO, e.g. {"p99": 100.0}
    points: list[SloPoint] = Field(default_factory=list)
    cost_ceiling: Figure | None = None  # the scenario's cost_ceiling_usd_per_1k
    within_ceiling: bool | None = None
    verdict: str = ""  # one plain sentence
    what_would: list[str] = Field(default_factory=list)  # when the SLO is not met here


class ScaleOut(_Model):
    """Instances needed at the peak from the measured per-instance goodput, and the Ray Serve
    settings that deploy them (`infertune serve RUN --engine ray`); report/run_scaleout.py."""

    variant_id: str | None = None
    policy_id: str | None = None
    statement: str = ""  # one plain sentence: what was measured, what follows
    per_instance_goodput: Figure | None = None  # None: nothing tested met the SLO
    peak: Figure | None = None  # the scenario's stated peak rate
    instances_at_peak: Figure | None = None
    derivations: dict[str, Figure] = Field(default_factory=dict)  # each autoscaling number
    settings: dict[str, float | int] = Field(default_factory=dict)  # Ray Serve's config
    deploy: str = ""  # the command that applies it
    warnings: list[str] = Field(default_factory=list)


class Report(_Model):
    schema_: str = Field(default=SCHEMA, alias="schema")
    kind: Literal["advice", "run"] = "advice"
    title: str
    hardware: str = Field(description="the machine figures were measured on, or the stated one")
    problem: Problem
    missing_facts: list[MissingFact] = Field(default_factory=list)
    assumptions: list[str] = Field(default_factory=list)
    diagnosis: Diagnosis
    options: list[Option] = Field(default_factory=list)
    first_week: list[PlanStep] = Field(default_factory=list)
    measurement_plan: MeasurementPlan
    guardrails: list[str] = Field(default_factory=list)
    variants: list[VariantRow] = Field(default_factory=list)
    policies: list[PolicyRow] = Field(default_factory=list)
    plots: PlotData = Field(default_factory=PlotData)
    recommendation: Recommendation | None = None
    serving: Serving | None = None
    slo_check: SloCheck | None = None
    scale_out: ScaleOut | None = None
    notes: list[str] = Field(default_factory=list)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _known_schema(self) -> Report:
        if self.schema_ != SCHEMA:
            raise ValueError(f"schema {self.schema_!r} is not supported; expected {SCHEMA!r}")
        return self

    # as _Model's, plus the "schema" alias on writing and a one-line ConfigError naming the
    # file and the first bad field on reading
    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True, by_alias=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "report") -> Report:
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "(top level)"
            raise ConfigError(
                f"{source}: not an {SCHEMA} report: {where}: {err['msg']}; "
                "re-create it with infertune advise or infertune optimize"
            ) from exc

    def save_json(self, path: str | Path) -> Path:
        return write_json(path, self.to_dict())

    @classmethod
    def load_json(cls, path: str | Path) -> Report:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"{path} not found; pass a run folder holding report.json")
        data = read_json(path, fix="re-create it with infertune advise --format json")
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the top level must be a JSON object")
        return cls.from_dict(data, source=str(path))
