"""Plots for the HTML report, drawn with matplotlib (Figure objects, no pyplot) into inline
SVG strings (no files, no network, no JavaScript). Each function returns None when its data
is absent, so the renderer simply leaves the plot out (advise reports have none).

Plots only draw the figures already in the report; they compute nothing new. matplotlib is
imported where a plot is drawn: it costs about a second, and only the HTML rendering needs it.
"""

from __future__ import annotations

import io

from infertune.report.schema import PlotData

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf")
MAX_SERIES = 7


def _figure(width: float = 6.4, height: float = 3.6):  # (Figure, Axes), untyped
    from matplotlib.figure import Figure as MplFigure

    # a Figure object, not pyplot: no backend switch, no global state between reports
    fig = MplFigure(figsize=(width, height), dpi=100)
    return fig, fig.add_subplot(111)


def _svg(fig, salt: str) -> str:
    import matplotlib

    fig.tight_layout()
    buf = io.StringIO()
    # a fixed salt per plot: element ids are stable (same report -> same bytes) and differ
    # between the plots that share one HTML page
    with matplotlib.rc_context({"svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight")
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and doctype for inline use


def latency_cdf_svg(data: PlotData) -> str | None:
    if not data.latency_cdf:
        return None
    fig, ax = _figure()
    for i, s in enumerate(data.latency_cdf[:MAX_SERIES]):
        xs, ys = zip(*s.points, strict=True) if s.points else ((), ())
        ax.plot(xs, ys, label=f"{s.label} ({s.source})", color=PALETTE[i % len(PALETTE)])
    first = data.latency_cdf[0]
    ax.set_xlabel(f"latency ({first.x_unit})")
    ax.set_ylabel(f"cumulative share ({first.y_unit})")
    ax.set_title("Latency CDF by variant")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _svg(fig, "latency_cdf")


def stage_breakdown_svg(data: PlotData) -> str | None:
    if not data.stage_breakdown:
        return None
    fig, ax = _figure()
    groups = data.stage_breakdown[:MAX_SERIES]
    stages: list[str] = []
    for g in groups:
        stages += [s.stage for s in g.stages if s.stage not in stages]
    lefts = [0.0] * len(groups)
    for i, stage in enumerate(stages):
        widths = [next((s.time.mid for s in g.stages if s.stage == stage), 0.0) for g in groups]
        ax.barh([g.label for g in groups], widths, left=lefts, label=stage,
                color=PALETTE[i % len(PALETTE)])
        lefts = [a + b for a, b in zip(lefts, widths, strict=True)]
    unit = groups[0].stages[0].time.unit if groups[0].stages else ""
    ax.set_xlabel(f"time per request ({unit})")
    ax.set_title("Where the time goes, by stage")
    # below the axes: inside, it would hide the bars it explains
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.18),
              ncol=min(len(stages), 4), frameon=False)
    return _svg(fig, "stage_breakdown")


def p99_vs_load_svg(data: PlotData) -> str | None:
    if not data.p99_vs_load:
        return None
    fig, ax = _figure()
    for i, s in enumerate(data.p99_vs_load[:MAX_SERIES]):
        xs, ys = zip(*s.points, strict=True) if s.points else ((), ())
        ax.plot(xs, ys, marker="o", label=f"{s.label} ({s.source})",
                color=PALETTE[i % len(PALETTE)])
    first = data.p99_vs_load[0]
    ax.set_xlabel(f"offered load ({first.x_unit})")
    ax.set_ylabel(f"p99 latency ({first.y_unit})")
    ax.set_title("p99 against load, top serving policies")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _svg(fig, "p99_vs_load")


def quality_speed_svg(data: PlotData) -> str | None:
    points = data.quality_vs_speed
    if not points:
        return None
    fig, ax = _figure()
    front = sorted((p for p in points if p.on_front), key=lambda p: p.speed.mid)
    others = [p for p in points if not p.on_front]
    ax.scatter([p.speed.mid for p in others], [p.quality.mid for p in others],
               color="#999999", label="dominated")
    ax.plot([p.speed.mid for p in front], [p.quality.mid for p in front], marker="o",
            color=PALETTE[1], label="Pareto front")
    for p in points:
        ax.annotate(p.label, (p.speed.mid, p.quality.mid), fontsize=7,
                    textcoords="offset points", xytext=(4, 4))
    ax.set_xlabel(f"speed ({points[0].speed.unit})")
    ax.set_ylabel(f"quality ({points[0].quality.unit})")
    ax.set_title("Quality against speed")
    ax.margins(0.12)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _svg(fig, "quality_speed")


PLOTS = (
    ("Latency CDF of the variants", latency_cdf_svg),
    ("Stage breakdown", stage_breakdown_svg),
    ("p99 against load for the top serving policies", p99_vs_load_svg),
    ("Quality against speed (Pareto front)", quality_speed_svg),
)


def render_plots(data: PlotData) -> list[tuple[str, str]]:
    """(title, inline SVG) for every plot whose data is present."""
    out = []
    for title, draw in PLOTS:
        svg = draw(data)
        if svg is not None:
            out.append((title, svg))
    return out
