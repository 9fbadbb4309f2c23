"""Markdown rendering of a Report: a summary of at most 700 words first (plain language, no
code), then the details outside the limit. Reads only the Report; never computes a figure.

The summary ends at SUMMARY_END (an HTML comment, invisible when rendered);
``summary_word_count`` counts the words before it as ``wc -w`` does. When the full summary is
over the limit, its least needed blocks move to the details (measurement plan, guardrails, the
missing facts' list, the first week, then the options past the third), each leaving a one-line
pointer, until it fits.
"""

from __future__ import annotations

from infertune.report.schema import Figure, Impact, Option, Percentiles, Report

SUMMARY_END = "<!-- end of summary -->"
SUMMARY_WORD_LIMIT = 700
SUMMARY_OPTIONS = 5
IMPACT_ORDER = ("p50", "p95", "p99", "throughput", "cost")


def figure_text(fig: Figure | None, name: str = "") -> str:
    """'p95 -60 to -30 % (estimate)' / 'p95 12.3 ms (measured)'; every figure carries its label."""
    if fig is None:
        return "n/a"
    unit = fig.unit
    if unit.startswith("% change"):
        unit = "%"
    signed = unit == "%"
    if fig.value is not None:
        number = _num(fig.value, signed)
    else:
        number = f"{_num(fig.low, signed)} to {_num(fig.high, signed)}"  # type: ignore[arg-type]
    lead = f"{name} " if name else ""
    return f"{lead}{number} {unit} ({fig.source})".replace(" %", "%")


def impact_text(impact: Impact, keys: tuple[str, ...] = IMPACT_ORDER) -> str:
    parts = [figure_text(getattr(impact, k), k) for k in keys if getattr(impact, k)]
    return "; ".join(parts) or "not known"


def summary_word_count(markdown: str) -> int:
    """Words in the summary part (before SUMMARY_END), counted as ``wc -w`` counts them: every
    whitespace-separated token, table pipes and rules included."""
    return len(markdown.split(SUMMARY_END, 1)[0].split())


def render_markdown(report: Report, limit: int = SUMMARY_WORD_LIMIT) -> str:
    summary, moved = fit_summary(report, limit)
    lines = summary + ["", SUMMARY_END, ""] + _details(report, moved)
    return "\n".join(lines).rstrip() + "\n"


# ---- summary --------------------------------------------------------------------------------

# The blocks that may leave the summary, least needed first: (key, the pointer left behind).
# The problem, the diagnosis, the top three options, the recommendation and the SLO check stay.
MOVABLE = (("measurement_plan", "The measurement plan"), ("guardrails", "The guardrails"),
           ("missing_facts", "The assumed missing facts"), ("first_week", "The first week's plan"),
           ("options_past_3", "Options 4 and 5"), ("what_would", "What would meet the SLO"))


def fit_summary(r: Report, limit: int = SUMMARY_WORD_LIMIT) -> tuple[list[str], list[str]]:
    """The summary's lines within ``limit`` words, and the keys of the blocks moved out."""
    moved: list[str] = []
    lines = _summary(r, moved)
    present = {"measurement_plan": True, "guardrails": bool(r.guardrails),
               "missing_facts": bool(r.missing_facts), "first_week": bool(r.first_week),
               "options_past_3": len(r.options) > 3,
               "what_would": bool(r.slo_check and r.slo_check.what_would)}
    for key, _ in MOVABLE:
        if len("\n".join(lines).split()) <= limit:
            break
        if not present[key]:
            continue
        moved.append(key)
        lines = _summary(r, moved)
    return _cut_to(lines, limit), moved


CUT_NOTE = ("*(The summary stops here at its {limit}-word limit; report.json holds every "
            "figure and statement in full.)*")


def _cut_to(lines: list[str], limit: int) -> list[str]:
    """``lines`` if they hold at most ``limit`` words (as ``wc -w`` counts), else the first
    words that fit with CUT_NOTE after them: the last resort once every movable block has
    moved (a long problem statement or verdict alone can pass the limit)."""
    if len("\n".join(lines).split()) <= limit:
        return lines
    note = CUT_NOTE.format(limit=limit)
    room = limit - len(note.split())
    out: list[str] = []
    for line in lines:
        words = line.split()
        if len(words) <= room:
            out.append(line)
            room -= len(words)
            continue
        if room > 0:
            out.append(" ".join(words[:room]) + "…")
        break
    return [*out, "", note]


def _summary(r: Report, moved: list[str] | None = None) -> list[str]:
    gone = set(moved or ())
    p = r.problem
    out = [f"# {r.title}", "", _provenance_line(r), "", "## Summary", "",
           f"**The problem.** {p.statement}", "",
           f"- Latency goal: {p.latency_goal}", f"- Throughput goal: {p.throughput_goal}",
           f"- Cost goal: {p.cost_goal}", ""]
    if r.missing_facts and "missing_facts" not in gone:
        out += _missing_facts(r) + [""]
    out += [f"**Where the time goes.** {r.diagnosis.summary}", ""]
    out += _key_figures(r)
    out += ["**Options, ranked** by impact per effort within the risk budget:", ""]
    shown = 3 if "options_past_3" in gone else SUMMARY_OPTIONS
    out += _options_table(r.options[:shown], short=True, inside_slo=bool(r.problem.inside_slo))
    if len(r.options) > shown:
        out += ["", f"{len(r.options) - shown} more options are in the details."]
    if r.recommendation and r.recommendation.variant_id:
        rec = r.recommendation
        out += ["", f"**Recommendation:** {rec.title} (variant `{rec.variant_id}`). "
                    f"{as_sentence(rec.reason)}"]
    out += _slo_check(r, with_what_would="what_would" not in gone)
    if "first_week" not in gone:
        out += [""] + _first_week(r)
    if "measurement_plan" not in gone:
        out += [""] + _measurement_plan(r)
    if "guardrails" not in gone:
        out += [""] + _guardrails(r)
    pointers = [text for key, text in MOVABLE if key in gone and key != "options_past_3"]
    if pointers:
        out += ["", f"{_joined(pointers)} {'is' if len(pointers) == 1 else 'are'} in the "
                    f"details (moved to keep this summary within {SUMMARY_WORD_LIMIT} words)."]
    return out


def _joined(items: list[str]) -> str:
    head = [items[0]] + [i[0].lower() + i[1:] for i in items[1:]]
    return head[0] if len(head) == 1 else ", ".join(head[:-1]) + " and " + head[-1]


def _missing_facts(r: Report) -> list[str]:
    return (["**Missing facts** (each would sharpen the advice; assumed meanwhile):", ""]
            + [f"- {m.fact}: assumed {m.assumption}." for m in r.missing_facts])


def _first_week(r: Report) -> list[str]:
    return ["**First week.**", ""] + [f"{i}. **{s.title}.** {s.detail}"
                                      for i, s in enumerate(r.first_week, 1)]


def _measurement_plan(r: Report) -> list[str]:
    mp = r.measurement_plan
    return ["**Measurement plan.** Log per stage: " + "; ".join(mp.log_per_stage) + ".",
            f"Compare variants {mp.compare_variants}",
            f"To catch quality loss or drift, {mp.quality_and_drift}",
            *([f"Measure it with {mp.measure_with}."] if mp.measure_with else [])]


def _guardrails(r: Report) -> list[str]:
    return ["**Guardrails.**", ""] + [f"- {g}" for g in r.guardrails]


def _moved_blocks(r: Report, moved: list[str]) -> list[str]:
    """The blocks fit_summary moved out of the summary, at the head of the details."""
    blocks = {"missing_facts": _missing_facts, "first_week": _first_week,
              "measurement_plan": _measurement_plan, "guardrails": _guardrails,
              "what_would": _what_would}
    out: list[str] = []
    for key, _ in MOVABLE:
        if key in moved and key in blocks and (key != "missing_facts" or r.missing_facts):
            out += blocks[key](r) + [""]
    return out


def _slo_check(r: Report, with_what_would: bool = True) -> list[str]:
    """The recommended configuration under load: measured beside predicted, then (unless
    moved to the details) what would meet the SLO when it is not met here."""
    c = r.slo_check
    if c is None:
        return []
    out = ["", f"**At the SLO, measured.** {c.verdict}", "",
           "| Rate | Offered | Achieved | Measured p50 / p95 / p99 | Simulator p50 / p95 / p99 "
           "| Shed | Meets SLO | Goodput | Cost per 1k |", "|---|---|---|---|---|---|---|---|---|"]
    for p in c.points:
        out.append(f"| {p.label} | {figure_text(p.offered)} | {figure_text(p.achieved)} | "
                   f"{_pcts(p.measured).replace(' | ', ' / ')} | "
                   f"{_pcts(p.predicted).replace(' | ', ' / ')} | {figure_text(p.shed)} | "
                   f"{p.verdict or _yes_no(p.meets_slo)} | {figure_text(p.goodput)} | "
                   f"{figure_text(p.cost_per_1k)} |")
    if c.cost_ceiling is not None:
        where = {True: "within it", False: "over it", None: "not known"}[c.within_ceiling]
        out += ["", f"Cost ceiling {figure_text(c.cost_ceiling)}: {where}."]
    if with_what_would and c.what_would:
        out += [""] + _what_would(r)
    return out


def _what_would(r: Report) -> list[str]:
    what = r.slo_check.what_would if r.slo_check is not None else []
    return ["**What would meet the SLO:**", ""] + [f"- {as_sentence(w)}" for w in what]


def _provenance_line(r: Report) -> str:
    if r.kind == "advice":
        return "_Advice from the scenario alone: every figure is an estimate unless marked._"
    return f"_Measured on {r.hardware}; figures not marked measured are estimates._"


def _key_figures(r: Report) -> list[str]:
    rows = [f"- {label}: {text}" for label, text in key_figures(r)]
    return rows + [""] if rows else []


KEY_FIGURES = {
    "requests_in_flight_at_peak": "Requests in flight at the peak",
    "kingman_wait_at_70pct": "Mean queue wait at 70 % utilisation",
}


def key_figures(r: Report) -> list[tuple[str, str]]:
    """(label, text) of the diagnosis figures the summary shows; measured latency first."""
    figs = r.diagnosis.figures
    out = []
    measured = [k for k in ("measured_e2e_p50", "measured_e2e_p95", "measured_e2e_p99")
                if k in figs]
    if measured:
        out.append(("End-to-end " + " / ".join(k[-3:] for k in measured) + " measured here",
                    ", ".join(figure_text(figs[k]) for k in measured)))
    out += [(label, figure_text(figs[k])) for k, label in KEY_FIGURES.items() if k in figs]
    return out


def headline_impact(impact: Impact, inside_slo: bool) -> str:
    """The one figure the ranking used: cost when the SLO is met, else p95 (p99, p50 after)."""
    order = ("cost", "p95", "p99") if inside_slo else ("p95", "p99", "p50", "throughput")
    for key in order:
        if getattr(impact, key):
            return figure_text(getattr(impact, key), key)
    return "not known"


def _options_table(options: list[Option], short: bool, inside_slo: bool = False) -> list[str]:
    if not options:
        return ["No option in the knowledge base applies to this scenario."]
    rows = ["| # | Option | Impact | Effort | Risk | How to verify |",
            "|---|---|---|---|---|---|"]
    for i, o in enumerate(options, 1):
        budget = "" if o.within_risk_budget else " (above risk budget)"
        effort = o.effort.level if short else f"{o.effort.level}: {o.effort.reason}"
        risk = o.risk.level if short else f"{o.risk.level}: {o.risk.reason}"
        impact = headline_impact(o.impact, inside_slo) if short else impact_text(o.impact)
        rows.append(f"| {i} | {_cell(o.title)} | {_cell(impact)} | "
                    f"{effort} | {_cell(risk)}{budget} | {_cell(o.verify)} |")
    return rows


# ---- details --------------------------------------------------------------------------------

def _details(r: Report, moved: list[str] | None = None) -> list[str]:
    out = ["## Details", ""] + _moved_blocks(r, moved or [])
    if r.assumptions:
        out += ["### Assumptions", ""] + [f"- {a}" for a in r.assumptions] + [""]
    if r.missing_facts:
        out += ["### What each missing fact would change", ""]
        out += [f"- **{m.fact}**: {m.would_change}." for m in r.missing_facts] + [""]
    out += ["### Diagnosis", "", r.diagnosis.queueing_vs_compute + ".", "",
            r.diagnosis.p50_vs_p99, ""] + _diagnosis_table(r)
    out += [""] + [f"- {k.replace('_', ' ')}: {figure_text(f)} - {f.basis}"
                   for k, f in r.diagnosis.figures.items()]
    out += ["", "### All options", ""] + _options_table(r.options, short=False) + [""]
    for o in r.options:
        out += [f"- **{o.title}** ({o.id}, {o.source}). {o.applicability}. "
                f"Invalidated by: {o.invalidated_by or 'not stated'}. "
                f"Source: {'; '.join(o.sources) or _first_basis(o)}."]
    out += _variants(r) + _policies(r) + _scale_out(r)
    if r.notes:
        out += ["", "### Notes", ""] + [f"- {n}" for n in r.notes]
    return out


def _diagnosis_table(r: Report) -> list[str]:
    timed = any(it.time or it.share for it in r.diagnosis.items)
    rows = ["| Stage | Likelihood | " + ("Time | " if timed else "") + "Why |",
            "|---|---|" + ("---|" if timed else "") + "---|"]
    for it in r.diagnosis.items:
        fig = it.time or it.share
        time = (_cell(figure_text(fig)) if fig else "") + " | " if timed else ""
        rows.append(f"| {it.stage} | {it.likelihood} | {time}{_cell(it.reason)} |")
    return rows


def _variants(r: Report) -> list[str]:
    if not r.variants:
        return []
    out = ["", "### Variants (measured)", "",
           "| Variant | p50 | p95 | p99 | Throughput | Quality | Verdict |",
           "|---|---|---|---|---|---|---|"]
    for v in r.variants:
        q = f"{v.quality_metric} {figure_text(v.quality)}" if v.quality else "n/a"
        out.append(f"| {v.variant_id} | {_pcts(v.latency)} | {figure_text(v.throughput)} | "
                   f"{q} | {v.quality_verdict} |")
    return out


def _policies(r: Report) -> list[str]:
    if not r.policies:
        return []
    out = ["", "### Serving policies", "",
           "| Policy | Variant | Settings | p50/p95/p99 at mean | p50/p95/p99 at peak | Goodput | "
           "Cost per 1k | Meets SLO |", "|---|---|---|---|---|---|---|---|"]
    for p in r.policies:
        settings = ", ".join(f"{k}={v}" for k, v in p.settings.items())
        out.append(f"| {p.policy_id} | {p.variant_id} | {settings} | "
                   f"{_pcts(p.at_mean).replace(' | ', ' / ')} | "
                   f"{_pcts(p.at_peak).replace(' | ', ' / ')} | {figure_text(p.goodput)} | "
                   f"{figure_text(p.cost_per_1k)} | {_yes_no(p.meets_slo)} |")
    return out


def _scale_out(r: Report) -> list[str]:
    """Instances at the peak from the measured goodput, and the Ray Serve settings for them."""
    s = r.scale_out
    if s is None:
        return []
    out = ["", "### Scale-out (Ray Serve)", "", as_sentence(s.statement), ""]
    out += [f"- {label}: {figure_text(fig)} - {fig.basis}" for label, fig in (
        ("Per-instance goodput", s.per_instance_goodput), ("Peak", s.peak),
        ("Instances at the peak", s.instances_at_peak)) if fig is not None]
    if s.settings:
        config = ", ".join(f"{k}={v:g}" for k, v in s.settings.items())
        out += ["", f"Ray Serve settings: `{config}`. `{s.deploy}` derives them again at start "
                f"from the same goodput, with the replica start and service times it measures "
                "on the cluster.", "",
                "| Setting | Value | Why |", "|---|---|---|"]
        out += [f"| {k} | {figure_text(f)} | {_cell(f.basis)} |"
                for k, f in s.derivations.items()]
    out += [f"- Warning: {w}" for w in s.warnings]
    return out


def _pcts(p: Percentiles) -> str:
    return " | ".join(figure_text(getattr(p, k)) for k in ("p50", "p95", "p99"))


def _first_basis(o: Option) -> str:
    for k in IMPACT_ORDER:
        fig = getattr(o.impact, k)
        if fig:
            return fig.basis
    return "not stated"


def _yes_no(value: bool | None) -> str:
    return {True: "yes", False: "no", None: "unknown"}[value]


def _cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def _num(x: float, signed: bool) -> str:
    text = f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"
    if signed and x > 0:
        text = "+" + text
    return text.replace("-", "\u2212")


def as_sentence(text: str) -> str:
    """A clause as a sentence: capitalised, ending with a full stop."""
    text = text.strip()
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."
