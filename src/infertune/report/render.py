"""One entry point for the three renderings of a Report: json (the report dict itself), md and
html; and ``write_report`` for a run directory (report.json, report.md, report.html)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from infertune.errors import ConfigError
from infertune.report.render_html import render_html
from infertune.report.render_md import render_markdown
from infertune.report.schema import Report

Format = Literal["md", "html", "json"]
FORMATS: tuple[str, ...] = ("md", "html", "json")


def render(report: Report, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(report.to_dict(), indent=2) + "\n"
    if fmt == "md":
        return render_markdown(report)
    if fmt == "html":
        return render_html(report)
    raise ConfigError(f"format {fmt!r} is not supported; use one of {', '.join(FORMATS)}")


def write_report(report: Report, folder: str | Path,
                 formats: tuple[str, ...] = FORMATS) -> dict[str, Path]:
    """Write report.<ext> for each format into ``folder``; returns {format: path}."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for fmt in formats:
        path = folder / f"report.{fmt}"
        path.write_text(render(report, fmt))
        out[fmt] = path
    return out
