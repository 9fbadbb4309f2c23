"""The one report builder: `advise` and `optimize` both assemble their Report here.

    Subject  (scenario, machine, runtime)  ─┐
    Findings (diagnosis, options, verdict) ─┼─> build_report() -> Report (schema.py)
    Library  (knowledge base, runtimes)    ─┤
    RunSections (variants, policies, ...)  ─┘   optimize only; advise leaves them empty

advise fills the Findings with estimates reasoned from the scenario (advisor.py); optimize with
what its run measured (run_report.py). Everything else is done once, here, in this order: the
missing facts and the assumptions made instead, the problem statement, the options (the
run's measured ones plus the knowledge base's, less what the runtime already does or a
measurement covers), one ranking, the recommendation, the first-week plan, the measurement
plan, the guardrails and the notes. Whether a figure is measured or an estimate is carried by
the figure itself (its ``source``), never by which command built the report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from infertune.config import FACTS, Scenario
from infertune.optimize.search.ranking import risk_budget
from infertune.report.generation import generation_gaps
from infertune.report.knowledge import HardwareProfile, KnowledgeBase
from infertune.report.next_steps import first_week, guardrails, measurement_plan
from infertune.report.options import context, rank_options, to_option
from infertune.report.problem import problem
from infertune.report.runtimes import AlreadyDone, RuntimeCatalogue
from infertune.report.schema import (
    Diagnosis,
    Figure,
    MissingFact,
    Option,
    PlotData,
    PolicyRow,
    Recommendation,
    Report,
    ScaleOut,
    Serving,
    SloCheck,
    VariantRow,
)

# What a report assumes for each missing fact (said in the report, never silently). Findings
# that rest on something else say so in Subject.assumed.
ASSUMPTIONS: dict[str, str] = {
    "model": "a generic model of unknown family: only options that do not depend on the "
             "architecture are listed",
    "deployment": "a single long-running server (not edge, not serverless)",
    "current": "unknown, so the gap to the target cannot be sized",
    "hardware": "a generic x86-64 CPU with AVX2 and no GPU",
    "inputs": "inputs of typical length for the task, one item per request",
    "slo": "no latency target: options are ranked by their effect on p95",
    "traffic": "steady (Poisson) arrivals",
    "constraints": "no measurable quality loss is acceptable and there is no cost ceiling",
}


@dataclass(frozen=True)
class Subject:
    """What the report is about: the scenario, the machine and the runtime the model runs in."""

    scenario: Scenario
    hardware: HardwareProfile
    hardware_known: bool  # stated or detected, so the problem statement names the machine
    runtime: str | None  # free text matched against the runtime catalogue
    runtime_source: str  # where that text came from, said in the assumptions
    supplied: frozenset[str] = frozenset()  # facts (FACTS keys) a measurement supplied
    assumed: Mapping[str, str] = field(default_factory=dict)  # fact -> what is assumed instead


@dataclass(frozen=True)
class Findings:
    """What is known about the subject, estimated or measured (each Figure says which)."""

    inside_slo: bool | None
    inside_measured: bool  # the verdict comes from a measurement of the baseline here
    diagnosis: Diagnosis
    baseline: Mapping[str, Figure] = field(default_factory=dict)  # "p50" -> measured latency
    options: list[Option] = field(default_factory=list)  # measured options, unranked
    covers: frozenset[str] = frozenset()  # knowledge entries those options replace
    impacts: Mapping[str, float] = field(default_factory=dict)  # option id -> measured impact
    assumptions: list[str] = field(default_factory=list)  # further ones the findings rest on
    recommendation: Recommendation | None = None  # None: the top-ranked option
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Library:
    """The knowledge base and the runtime catalogue the options come from."""

    knowledge: KnowledgeBase
    runtimes: RuntimeCatalogue


@dataclass(frozen=True)
class RunSections:
    """The sections only a run fills (advise leaves them empty)."""

    variants: list[VariantRow] = field(default_factory=list)
    policies: list[PolicyRow] = field(default_factory=list)
    plots: PlotData = field(default_factory=PlotData)
    serving: Serving | None = None
    slo_check: SloCheck | None = None
    scale_out: ScaleOut | None = None


def build_report(kind: Literal["advice", "run"], title: str, subject: Subject,
                 findings: Findings, library: Library,
                 sections: RunSections | None = None) -> Report:
    sc, hw = subject.scenario, subject.hardware
    sections = sections or RunSections()
    missing = [m for m in sc.missing_facts() if m not in subject.supplied]
    gaps = generation_gaps(sc)
    matched = library.runtimes.match(subject.runtime)
    done = library.runtimes.already_done(matched)
    ctx = context(sc, hw, frozenset(r.id for r in matched))
    applicable = library.knowledge.applicable(ctx)
    known = [to_option(e, ctx) for e in applicable
             if e.id not in done and e.id not in findings.covers]
    moot = [done[e.id] for e in applicable if e.id in done]
    inside = findings.inside_slo
    options = rank_options([*findings.options, *known], sc, inside, findings.impacts)
    assumed = {m: subject.assumed.get(m, ASSUMPTIONS[m]) for m in missing}
    assumptions = [f"{m}: {text}." for m, text in assumed.items()]
    assumptions += [f"{g.fact}: {g.assumption}." for g in gaps]
    assumptions += [f"hardware: {note}." for note in hw.notes]
    assumptions += [f"hardware: {a}." for a in hw.assumptions]
    if matched:
        assumptions.append(f"runtime: {' and '.join(r.name for r in matched)} (from "
                           f"{subject.runtime_source}); what it already does is left out of "
                           f"the options ({len(moot)} left out, listed in the notes).")
    assumptions += findings.assumptions
    assumptions.append(f"risk budget: {risk_budget(sc)} (options above it are listed last).")
    floor = sc.constraints.quality_floor
    return Report(
        kind=kind, title=title, hardware=hw.description,
        problem=problem(sc, hw, inside, hardware_known=subject.hardware_known,
                        measured_inside=findings.inside_measured, baseline=findings.baseline),
        missing_facts=[MissingFact(fact=m, would_change=FACTS[m], assumption=text)
                       for m, text in assumed.items()] + [g.missing() for g in gaps],
        assumptions=assumptions, diagnosis=findings.diagnosis, options=options,
        first_week=first_week(options, [*missing, *(g.fact for g in gaps)], inside,
                              measured=_measured_here(findings.diagnosis)),
        measurement_plan=measurement_plan(sc.model.task, floor.metric if floor else None),
        guardrails=guardrails(), variants=sections.variants, policies=sections.policies,
        plots=sections.plots,
        recommendation=findings.recommendation or _top(options),
        serving=sections.serving, slo_check=sections.slo_check,
        scale_out=sections.scale_out,
        notes=[*findings.notes,
               f"knowledge base: {len(library.knowledge.entries)} entries, {len(known)} apply "
               "to this scenario", *(_moot_note(m) for m in moot)])


def _measured_here(diagnosis: Diagnosis) -> bool:
    """The baseline was measured (so the plan's first step is to re-measure on the production
    hardware, not to measure for the first time)."""
    return any(f.source == "measured" for f in diagnosis.figures.values())


def _top(options: list[Option]) -> Recommendation | None:
    if not options:
        return None
    top = options[0]
    how = "measured" if top.source == "measured" else "estimated"
    return Recommendation(option_id=top.id, title=top.title,
                          reason=f"highest {how} impact per effort within the risk budget; "
                                 "confirm it by measurement first")


def _moot_note(m: AlreadyDone) -> str:
    return f"not recommended, {m.runtime} already does it: {m.entry_id} — {m.how} ({m.source})."
