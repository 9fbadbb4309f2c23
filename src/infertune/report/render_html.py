"""Self-contained HTML rendering of a Report: one file, inline CSS, plots as inline SVG, no
scripts and nothing fetched from the network, so it opens offline. Same content and order as
the Markdown (summary first, details after); plots whose data is absent are left out."""

from __future__ import annotations

from html import escape

from infertune.report.plots import render_plots
from infertune.report.render_md import (
    IMPACT_ORDER,
    SUMMARY_OPTIONS,
    as_sentence,
    figure_text,
    headline_impact,
    impact_text,
    key_figures,
)
from infertune.report.schema import Figure, Option, Percentiles, Report

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;max-width:1100px;
margin:2em auto;padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;
margin-top:1.6em}h3{margin-top:1.3em}
.provenance{color:#555;font-style:italic}
table{border-collapse:collapse;width:100%;margin:.6em 0;font-size:.92em}
th,td{border:1px solid #ccc;padding:.35em .5em;text-align:left;vertical-align:top}
th{background:#f3f5f7}tr:nth-child(even) td{background:#fafbfc}
.fig{white-space:nowrap}.estimate{color:#8a5a00}.measured{color:#0b6e2e}
.level-low{color:#0b6e2e}.level-medium{color:#8a5a00}.level-high{color:#b00020}
.plot{margin:1em 0;border:1px solid #e3e3e3;padding:.5em;overflow-x:auto}
.plot svg{width:100%;max-width:820px;height:auto;display:block}
.wide{overflow-x:auto}td{overflow-wrap:anywhere}td.n{white-space:nowrap}
td[class^="level-"]{overflow-wrap:normal;white-space:nowrap}
.note{color:#555;font-size:.9em}ul{padding-left:1.3em}
"""


def render_html(report: Report) -> str:
    body = _summary(report) + _plots(report) + _details(report)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(report.title)}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def _fig(fig: Figure | None, name: str = "") -> str:
    if fig is None:
        return "n/a"
    return (f'<span class="fig {fig.source}" title="{escape(fig.basis)}">'
            f"{escape(figure_text(fig, name))}</span>")


def _summary(r: Report) -> list[str]:
    p = r.problem
    prov = ("Advice from the scenario alone: every figure is an estimate unless marked."
            if r.kind == "advice" else
            f"Measured on {r.hardware}; figures not marked measured are estimates.")
    out = [f"<h1>{escape(r.title)}</h1>", f'<p class="provenance">{escape(prov)}</p>',
           "<h2>Summary</h2>",
           f"<p><strong>The problem.</strong> {escape(p.statement)}</p>",
           _ul([f"Latency goal: {p.latency_goal}", f"Throughput goal: {p.throughput_goal}",
                f"Cost goal: {p.cost_goal}"])]
    if r.missing_facts:
        out.append("<p><strong>Missing facts</strong> (each would sharpen the advice; "
                   "assumed meanwhile):</p>")
        out.append(_ul([f"{m.fact}: assumed {m.assumption}." for m in r.missing_facts]))
    out.append(f"<p><strong>Where the time goes.</strong> {escape(r.diagnosis.summary)}</p>")
    items = [f"{escape(label)}: {escape(text)}" for label, text in key_figures(r)]
    if items:
        out.append("<ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>")
    out.append("<p><strong>Options, ranked</strong> by impact per effort within the risk "
               "budget:</p>")
    out.append(_options_table(r.options[:SUMMARY_OPTIONS], True, bool(p.inside_slo)))
    if r.recommendation and r.recommendation.variant_id:
        rec = r.recommendation
        out.append(f"<p><strong>Recommendation:</strong> {escape(rec.title)} (variant <code>"
                   f"{escape(rec.variant_id or '')}</code>). "
                   f"{escape(as_sentence(rec.reason))}</p>")
    out += _slo_check(r)
    out.append("<h3>First week</h3><ol>" + "".join(
        f"<li><strong>{escape(s.title)}.</strong> {escape(s.detail)}</li>"
        for s in r.first_week) + "</ol>")
    mp = r.measurement_plan
    out.append("<h3>Measurement plan</h3>" + _ul([
        "Log per stage: " + "; ".join(mp.log_per_stage) + ".",
        f"Compare variants {mp.compare_variants}",
        f"To catch quality loss or drift, {mp.quality_and_drift}",
        *([f"Measure it with {mp.measure_with}."] if mp.measure_with else [])]))
    out.append("<h3>Guardrails</h3>" + _ul(r.guardrails))
    return out


def _slo_check(r: Report) -> list[str]:
    c = r.slo_check
    if c is None:
        return []
    rows = []
    for p in c.points:
        meets = p.verdict or {True: "yes", False: "no", None: "unknown"}[p.meets_slo]
        rows.append(f"<tr><td>{escape(p.label)}</td><td>{_fig(p.offered)}</td>"
                    f"<td>{_fig(p.achieved)}</td>{_pct_cells(p.measured)}"
                    f"{_pct_cells(p.predicted)}<td>{_fig(p.shed)}</td><td>{meets}</td>"
                    f"<td>{_fig(p.goodput)}</td><td>{_fig(p.cost_per_1k)}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in (
        "Rate", "Offered", "Achieved", "p50 measured", "p95 measured", "p99 measured",
        "p50 simulator", "p95 simulator", "p99 simulator", "Shed", "Meets SLO", "Goodput",
        "Cost per 1k"))
    out = [f"<p><strong>At the SLO, measured.</strong> {escape(c.verdict)}</p>",
           f'<div class="wide"><table><thead><tr>{head}</tr></thead>'
           f"<tbody>{''.join(rows)}</tbody></table></div>"]
    if c.cost_ceiling is not None:
        where = {True: "within it", False: "over it", None: "not known"}[c.within_ceiling]
        out.append(f"<p>Cost ceiling {_fig(c.cost_ceiling)}: {where}.</p>")
    if c.what_would:
        out += ["<p><strong>What would meet the SLO:</strong></p>",
                _ul([as_sentence(w) for w in c.what_would])]
    return out


def _options_table(options: list[Option], short: bool, inside_slo: bool = False) -> str:
    if not options:
        return "<p>No option in the knowledge base applies to this scenario.</p>"
    rows = []
    for i, o in enumerate(options, 1):
        if short:
            impact = escape(headline_impact(o.impact, inside_slo))
        else:
            impact = "<br>".join(_fig(getattr(o.impact, k), k) for k in IMPACT_ORDER
                                 if getattr(o.impact, k)) or escape(impact_text(o.impact))
        budget = "" if o.within_risk_budget else " (above risk budget)"
        effort = o.effort.level if short else f"{o.effort.level}: {o.effort.reason}"
        risk = o.risk.level if short else f"{o.risk.level}: {o.risk.reason}"
        rows.append(
            f'<tr><td class="n">{i}</td><td>{escape(o.title)}</td><td>{impact}</td>'
            f'<td class="level-{o.effort.level}">{escape(effort)}</td>'
            f'<td class="level-{o.risk.level}">{escape(risk + budget)}</td>'
            f"<td>{escape(o.verify)}</td></tr>")
    return ('<div class="wide"><table><thead><tr><th>#</th><th>Option</th><th>Impact</th>'
            "<th>Effort</th>"
            "<th>Risk</th><th>How to verify</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table></div>")


def _plots(r: Report) -> list[str]:
    plots = render_plots(r.plots)
    if not plots:
        return []
    out = ["<h2>Plots</h2>"]
    for title, svg in plots:
        out.append(f'<div class="plot"><h3>{escape(title)}</h3>{svg}</div>')
    return out


def _details(r: Report) -> list[str]:
    out = ["<h2>Details</h2>"]
    if r.assumptions:
        out += ["<h3>Assumptions</h3>", _ul(r.assumptions)]
    if r.missing_facts:
        out += ["<h3>What each missing fact would change</h3>",
                _ul([f"{m.fact}: {m.would_change}." for m in r.missing_facts])]
    d = r.diagnosis
    out += ["<h3>Diagnosis</h3>", f"<p>{escape(d.queueing_vs_compute)}.</p>",
            f"<p>{escape(d.p50_vs_p99)}</p>",
            _diagnosis_table(r)]
    if d.figures:
        out.append("<ul>" + "".join(
            f"<li>{escape(k.replace('_', ' '))}: {_fig(f)} &mdash; {escape(f.basis)}</li>"
            for k, f in d.figures.items()) + "</ul>")
    out += ["<h3>All options</h3>", _options_table(r.options, short=False)]
    out.append(_ul([f"{o.title} ({o.id}, {o.source}). {o.applicability}. Invalidated by: "
                    f"{o.invalidated_by or 'not stated'}. Source: {'; '.join(o.sources)}."
                    for o in r.options]))
    out += _variants(r) + _policies(r) + _scale_out(r)
    if r.notes:
        out += ["<h3>Notes</h3>", _ul(r.notes)]
    return out


def _diagnosis_table(r: Report) -> str:
    timed = any(it.time or it.share for it in r.diagnosis.items)
    head = "<tr><th>Stage</th><th>Likelihood</th>" + ("<th>Time</th>" if timed else "")
    rows = "".join(
        f"<tr><td>{escape(it.stage)}</td><td>{escape(it.likelihood)}</td>"
        + (f"<td>{_fig(it.time or it.share)}</td>" if timed else "")
        + f"<td>{escape(it.reason)}</td></tr>" for it in r.diagnosis.items)
    return f"<table><thead>{head}<th>Why</th></tr></thead><tbody>{rows}</tbody></table>"


def _variants(r: Report) -> list[str]:
    if not r.variants:
        return []
    rows = "".join(
        f"<tr><td>{escape(v.variant_id)}</td>{_pct_cells(v.latency)}<td>{_fig(v.throughput)}"
        f"</td><td>{escape(v.quality_metric)} {_fig(v.quality) if v.quality else ''}</td>"
        f"<td>{escape(v.quality_verdict)}</td></tr>" for v in r.variants)
    return ["<h3>Variants</h3><table><thead><tr><th>Variant</th><th>p50</th><th>p95</th>"
            "<th>p99</th><th>Throughput</th><th>Quality</th><th>Verdict</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"]


def _policies(r: Report) -> list[str]:
    if not r.policies:
        return []
    rows = []
    for p in r.policies:
        settings = ", ".join(f"{k}={v}" for k, v in p.settings.items())
        meets = {True: "yes", False: "no", None: "unknown"}[p.meets_slo]
        rows.append(f"<tr><td>{escape(p.policy_id)}</td><td>{escape(p.variant_id)}</td>"
                    f"<td>{escape(settings)}</td>{_pct_cells(p.at_mean)}{_pct_cells(p.at_peak)}"
                    f"<td>{_fig(p.goodput)}</td><td>{_fig(p.cost_per_1k)}</td>"
                    f"<td>{meets}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in (
        "Policy", "Variant", "Settings", "p50 mean", "p95 mean", "p99 mean", "p50 peak",
        "p95 peak", "p99 peak", "Goodput", "Cost per 1k", "Meets SLO"))
    return [f'<h3>Serving policies</h3><div class="wide"><table><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div>"]


def _scale_out(r: Report) -> list[str]:
    s = r.scale_out
    if s is None:
        return []
    out = ["<h3>Scale-out (Ray Serve)</h3>", f"<p>{escape(as_sentence(s.statement))}</p>"]
    figs = [f"{escape(label)}: {_fig(fig)} &mdash; {escape(fig.basis)}" for label, fig in (
        ("Per-instance goodput", s.per_instance_goodput), ("Peak", s.peak),
        ("Instances at the peak", s.instances_at_peak)) if fig is not None]
    if figs:
        out.append("<ul>" + "".join(f"<li>{f}</li>" for f in figs) + "</ul>")
    if s.settings:
        config = ", ".join(f"{k}={v:g}" for k, v in s.settings.items())
        rows = "".join(f"<tr><td>{escape(k)}</td><td>{_fig(f)}</td><td>{escape(f.basis)}"
                       "</td></tr>" for k, f in s.derivations.items())
        out += [f"<p>Ray Serve settings: <code>{escape(config)}</code>. <code>"
                f"{escape(s.deploy)}</code> derives them again at start from the same goodput, "
                "with the replica start and service times it measures on the cluster.</p>",
                f"<table><thead><tr><th>Setting</th><th>Value</th><th>Why</th></tr></thead>"
                f"<tbody>{rows}</tbody></table>"]
    if s.warnings:
        out.append(_ul([f"Warning: {w}" for w in s.warnings]))
    return out


def _pct_cells(p: Percentiles) -> str:
    return "".join(f"<td>{_fig(getattr(p, k))}</td>" for k in ("p50", "p95", "p99"))


def _ul(items: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{escape(i)}</li>" for i in items) + "</ul>"
