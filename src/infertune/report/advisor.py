"""`advise`: from a Scenario alone to a Report whose every figure is a labelled estimate.

Order of the reasoning: missing facts and stated assumptions -> the problem in one sentence ->
where the time likely goes -> the options that apply (knowledge base, filtered by the scenario,
the hardware catalogue and the runtime catalogue) -> ranked by impact per effort within a risk
budget -> the first-week plan, the measurement plan and the guardrails.

Vague facts never stop it: hardware the catalogue does not know is assumed to be the generic
hardware of its architecture, and every such assumption is listed with how to correct it. Only
contradictions (p50 above p99, a negative value, an SLO on a metric that does not exist) are
errors, raised when the scenario is read.
"""

from __future__ import annotations

from infertune.config import FACTS, Scenario
from infertune.report.diagnosis import diagnose
from infertune.report.generation import generation_gaps, prefill_and_decode
from infertune.report.knowledge import (
    Context,
    HardwareCatalogue,
    HardwareProfile,
    KnowledgeBase,
    KnowledgeEntry,
    load_knowledge,
)
from infertune.report.plan import first_week, guardrails, measurement_plan
from infertune.report.ranking import Level, inside_slo, rank, risk_budget
from infertune.report.runtimes import AlreadyDone, RuntimeCatalogue
from infertune.report.schema import (
    Diagnosis,
    Figure,
    Impact,
    MissingFact,
    Option,
    Problem,
    Rated,
    Recommendation,
    Report,
)

# What advise assumes for each missing fact (said in the report, never silently).
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
GENERIC_CPU = HardwareProfile(description="an assumed generic x86-64 CPU (AVX2)",
                              caps=frozenset({"cpu", "avx2"}), cpu="generic x86-64")
LEVELS: tuple[Level, ...] = ("low", "medium", "high")
SUMMARY_OPTIONS = 6


def advise(scenario: Scenario, knowledge: KnowledgeBase | None = None,
           catalogue: HardwareCatalogue | None = None,
           runtimes: RuntimeCatalogue | None = None) -> Report:
    """Build the advice Report for ``scenario``; never refuses a vague fact (see above)."""
    knowledge = knowledge or load_knowledge()
    catalogue = catalogue or HardwareCatalogue.load()
    runtimes = runtimes or RuntimeCatalogue.load()  # its ids are checked by the tests
    missing = scenario.missing_facts()
    hw = (catalogue.resolve(scenario.deployment.hardware) if "hardware" not in missing
          else GENERIC_CPU)
    pattern = scenario.traffic.pattern or "steady"
    inside = inside_slo(scenario)
    matched = runtimes.match(scenario.model.runtime)
    ctx = context(scenario, hw, pattern, frozenset(r.id for r in matched))
    budget = risk_budget(scenario)
    done = runtimes.already_done(matched)
    applicable = knowledge.applicable(ctx)
    options = _ranked_options([e for e in applicable if e.id not in done], ctx, inside, budget)
    moot = [done[e.id] for e in applicable if e.id in done]
    gaps = generation_gaps(scenario)
    floor = scenario.constraints.quality_floor
    assumptions = [f"{name}: {ASSUMPTIONS[name]}." for name in missing]
    assumptions += [f"{g.fact}: {g.assumption}." for g in gaps]
    assumptions += [f"hardware: {note}." for note in hw.notes]
    assumptions += [f"hardware: {a}." for a in hw.assumptions]
    if matched:
        assumptions.append(f"runtime: {' and '.join(r.name for r in matched)} (from "
                           f"model.runtime); what it already does is left out of the options "
                           f"({len(moot)} left out, listed in the notes).")
    assumptions.append(f"risk budget: {budget} (options above it are listed last).")
    top = options[0] if options else None
    return Report(
        kind="advice",
        title=f"Latency advice: {scenario.model.name or scenario.model.family or 'model'}",
        hardware=hw.description,
        problem=problem(scenario, hw, inside),
        missing_facts=[MissingFact(fact=m, would_change=FACTS[m], assumption=ASSUMPTIONS[m])
                       for m in missing] + [g.missing() for g in gaps],
        assumptions=assumptions,
        diagnosis=_diagnosis(scenario, hw, pattern),
        options=options,
        first_week=first_week(options, [*missing, *(g.fact for g in gaps)], inside),
        measurement_plan=measurement_plan(scenario.model.task,
                                          floor.metric if floor else None),
        guardrails=guardrails(),
        recommendation=Recommendation(option_id=top.id, title=top.title,
                                      reason="highest estimated impact per effort within the "
                                             "risk budget; confirm it by measurement first")
        if top else None,
        notes=[f"knowledge base: {len(knowledge.entries)} entries, "
               f"{len(options)} apply to this scenario"] + [_moot_note(m) for m in moot],
    )


def _moot_note(m: AlreadyDone) -> str:
    return f"not recommended, {m.runtime} already does it: {m.entry_id} — {m.how} ({m.source})."


def _diagnosis(sc: Scenario, hw: HardwareProfile, pattern: str) -> Diagnosis:
    """The generic diagnosis, with prefill and decode apart for a generation task."""
    base = diagnose(sc, hw, pattern)
    if sc.model.task != "generation":
        return base
    items, figures, sentence = prefill_and_decode(sc, hw)
    return base.model_copy(update={"items": [*base.items, *items],
                                   "figures": {**base.figures, **figures},
                                   "summary": f"{base.summary} {sentence}"})


def problem(sc: Scenario, hw: HardwareProfile, inside: bool | None) -> Problem:
    m, cur, tr = sc.model, sc.current, sc.traffic
    what = m.name or " ".join(x for x in (m.family, m.task) if x) or "a model"
    framework = f" in {m.runtime or m.framework}" if (m.runtime or m.framework) else ""
    where = f" on {hw.description}" if "hardware" not in sc.missing_facts() else ""
    now = ", ".join(p for p in (_percentiles_text(cur.p50_ms, cur.p95_ms, cur.p99_ms),
                                _token_text(cur.ttft_p95_ms, cur.ttft_p99_ms, cur.itl_p95_ms,
                                            cur.itl_p99_ms)) if p)
    state = f" runs at {now}" if now else " has no stated current latency"
    if cur.rps:
        state += f" at {_n(cur.rps)} requests/s"
    targets = sc.slo.targets()
    goal = ", ".join([*(f"{k} {_n(v)} ms" for k, v in targets.items()),
                      *(f"{_token_name(k)} {_n(v)} ms" for k, v in sc.slo.token_targets().items())])
    against = f" against a target of {goal}" if goal else " with no stated target"
    traffic = ""
    if tr.pattern:
        rates = _rates(tr.mean_rps, tr.peak_rps)
        traffic = f", under {tr.pattern} traffic{f' ({rates})' if rates else ''}"
    verdict = ""
    if inside is True:
        verdict = "; it is already inside its SLO, so the question is cost"
    elif inside is False:
        verdict = "; it misses its SLO"
    statement = f"{what[0].upper()}{what[1:]}{framework}{where}{state}{against}{traffic}{verdict}."
    return Problem(statement=statement,
                   latency_goal=_latency_goal({**targets, **{
                       _token_name(k): v for k, v in sc.slo.token_targets().items()}}),
                   throughput_goal=_throughput_goal(sc), cost_goal=_cost_goal(sc),
                   inside_slo=inside)


def _latency_goal(targets: dict[str, float]) -> str:
    if not targets:
        return "not stated; assume the team wants p95 lower than today"
    return "Keep " + " and ".join(f"{k} at or below {_n(v)} ms" for k, v in targets.items()) + "."


def _throughput_goal(sc: Scenario) -> str:
    tr = sc.traffic
    if tr.peak_rps:
        return (f"Hold the latency goal up to the peak of {_n(tr.peak_rps)} requests/s"
                f"{f' (mean {_n(tr.mean_rps)})' if tr.mean_rps else ''}.")
    if tr.mean_rps or sc.current.rps:
        return f"Hold the latency goal at {_n(tr.mean_rps or sc.current.rps or 0)} requests/s."
    return "Not stated; assume today's request rate."


def _cost_goal(sc: Scenario) -> str:
    d, c = sc.deployment, sc.constraints
    if c.cost_ceiling_usd_per_1k is not None:
        return f"At most ${_n(c.cost_ceiling_usd_per_1k)} per 1,000 requests."
    if d.cost_per_hour_usd is not None:
        return f"No ceiling stated; spend no more than today's ${_n(d.cost_per_hour_usd)}/hour."
    return "Not stated; assume no higher cost than today."


def context(sc: Scenario, hw: HardwareProfile, pattern: str,
            runtimes: frozenset[str] = frozenset()) -> Context:
    """The facts knowledge entries are matched against (target defaults to server)."""
    skills = sc.constraints.team_skills
    return Context(family=sc.model.family, task=sc.model.task, framework=sc.model.framework,
                   target=sc.deployment.target or "server", pattern=pattern, caps=hw.caps,
                   skills=frozenset(s.lower() for s in skills) if skills is not None else None,
                   runtimes=runtimes)


_context = context  # the name optimize/runreport.py imports


def _ranked_options(entries: list[KnowledgeEntry], ctx: Context, inside: bool | None,
                    budget: Level) -> list[Option]:
    options = [to_option(e, ctx) for e in entries]
    objective = "cost" if inside else "p95"

    def impact(o: Option) -> float:
        # inside the SLO only cost counts; otherwise p95, then the other latency figures
        fig = o.impact.cost if objective == "cost" else (
            o.impact.p95 or o.impact.p99 or o.impact.p50)
        return -fig.mid if fig else 0.0

    ranked = rank(options, impact=impact, effort=lambda o: o.effort.level,
                  risk=lambda o: o.risk.level, risk_budget=budget)
    return [r.item.model_copy(update={"within_risk_budget": r.within_risk_budget})
            for r in ranked]


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
    if lacking and effort.level != "high":
        bumped = LEVELS[LEVELS.index(effort.level) + 1]
        effort = Rated(level=bumped, reason=f"{effort.reason}; the team lists no "
                                            f"{', '.join(lacking)} experience")
    elif lacking:
        effort = Rated(level="high", reason=f"{effort.reason}; the team lists no "
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


def _percentiles_text(p50: float | None, p95: float | None, p99: float | None) -> str:
    parts = [f"{k} {_n(v)} ms" for k, v in (("p50", p50), ("p95", p95), ("p99", p99)) if v]
    return ", ".join(parts)


def _token_text(ttft95: float | None, ttft99: float | None, itl95: float | None,
                itl99: float | None) -> str:
    pairs = (("TTFT p95", ttft95), ("TTFT p99", ttft99), ("ITL p95", itl95), ("ITL p99", itl99))
    return ", ".join(f"{k} {_n(v)} ms" for k, v in pairs if v is not None)


def _token_name(key: str) -> str:
    """"ttft_p95" -> "TTFT p95"."""
    metric, _, pct = key.partition("_")
    return f"{metric.upper()} {pct}"


def _rates(mean: float | None, peak: float | None) -> str:
    parts = [f"{k} {_n(v)}" for k, v in (("mean", mean), ("peak", peak)) if v]
    return " and ".join(parts) + " requests/s" if parts else ""


def _n(x: float) -> str:
    return f"{x:g}"
