"""Options from the knowledge base, and the one ranking both reports use.

A knowledge entry becomes an Option whose impact Figures are labelled estimates with the
entry's source; a measured option (a variant a run timed, say) arrives already built, and the
knowledge entries it covers are left out. Every option is then ranked by one rule: impact per
effort within the scenario's risk budget, the impact taken from a measurement where the caller
has one (a variant's gain on the SLO's own percentile), else read from the option's Figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from infertune.config import Scenario
from infertune.optimize.search.ranking import LEVELS, rank, risk_budget
from infertune.report.knowledge import Context, HardwareProfile, KnowledgeEntry
from infertune.report.schema import Figure, Impact, Option, Rated


def context(sc: Scenario, hw: HardwareProfile, runtimes: frozenset[str] = frozenset()) -> Context:
    """The facts knowledge entries are matched against (target defaults to server, the traffic
    pattern to steady)."""
    skills = sc.constraints.team_skills
    return Context(family=sc.model.family, task=sc.model.task, framework=sc.model.framework,
                   target=sc.deployment.target or "server",
                   pattern=sc.traffic.pattern or "steady", caps=hw.caps,
                   skills=frozenset(s.lower() for s in skills) if skills is not None else None,
                   runtimes=runtimes)


def to_option(entry: KnowledgeEntry, ctx: Context) -> Option:
    """A knowledge entry as a report Option with estimate Figures (percent changes)."""
    basis = f"estimate for this scenario; range from: {entry.source}"
    figs: dict[str, Figure] = {}
    for name, (low, high) in entry.impact.items():
        sign = 1 if name == "throughput" else -1
        ends = sorted((sign * low * 100, sign * high * 100))
        unit = f"% change in {name}" if name != "cost" else "% change in cost per request"
        figs[name] = Figure(low=round(ends[0], 1) + 0.0, high=round(ends[1], 1) + 0.0, unit=unit,
                            source="estimate", basis=basis)
    effort = Rated(level=entry.effort.level, reason=entry.effort.reason)
    lacking = [s for s in entry.skills if ctx.skills is not None and s not in ctx.skills]
    if lacking:
        # a skill the team lacks costs one effort level (high stays high)
        bumped = LEVELS[min(LEVELS.index(effort.level) + 1, len(LEVELS) - 1)]
        effort = Rated(level=bumped, reason=f"{effort.reason}; the team lists no "
                                            f"{', '.join(lacking)} experience")
    return Option(id=entry.id, title=entry.title, category=entry.category,
                  impact=Impact(**figs), effort=effort,
                  risk=Rated(level=entry.risk.level, reason=entry.risk.reason),
                  verify=entry.verify, invalidated_by=entry.invalidated_by,
                  applicability=_applicability(entry, ctx), source="estimate",
                  sources=[entry.source])


def _applicability(entry: KnowledgeEntry, ctx: Context) -> str:
    a = entry.applies
    parts = []
    if a.tasks:
        parts.append(f"task {ctx.task}")
    if a.families:
        parts.append(f"{ctx.family} model")
    if a.any_caps:
        parts.append("hardware with " + " or ".join(sorted(set(a.any_caps) & ctx.caps)))
    if a.not_caps:
        parts.append("no " + ", ".join(a.not_caps))
    if a.patterns:
        parts.append(f"{ctx.pattern} traffic")
    if a.targets or a.not_targets:
        parts.append(f"{ctx.target} deployment")
    return "applies: " + ("; ".join(parts) if parts else "any model and hardware")


def rank_options(options: Sequence[Option], sc: Scenario, inside: bool | None,
                 measured: Mapping[str, float] | None = None) -> list[Option]:
    """``options`` best first: impact per effort within the scenario's risk budget.
    ``measured``: option id -> impact (higher is better) where a measurement decides, e.g. a
    variant's percent gain on the SLO's own percentile against one common baseline figure, so
    the ranking agrees with the run's own choice. Every other option is read from its impact
    Figures: cost inside the SLO (only cost counts there), else p95, then p99, then p50 (the
    order the report's summary table shows them in, so the table reads in ranked order)."""
    decided = measured or {}

    def impact(o: Option) -> float:
        if o.id in decided:
            return decided[o.id]
        fig = o.impact.cost if inside else (o.impact.p95 or o.impact.p99 or o.impact.p50)
        return -fig.mid if fig else 0.0

    ranked = rank(list(options), impact=impact, effort=lambda o: o.effort.level,
                  risk=lambda o: o.risk.level, risk_budget=risk_budget(sc))
    return [r.item.model_copy(update={"within_risk_budget": r.within_risk_budget
                                      and r.item.within_risk_budget}) for r in ranked]
