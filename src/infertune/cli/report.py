"""`infertune report RUN`: re-render a run directory's report.json (or any report.json file)
to report.md / report.html beside it, or print one format to stdout."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from infertune.artifacts import RunDir
from infertune.errors import ConfigError
from infertune.report.render import FORMATS, render, write_report
from infertune.report.schema import Report


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report_cmd(
        run: Annotated[Path, typer.Argument(help="run folder holding report.json, or the file")],
        fmt: Annotated[str | None, typer.Option(
            "--format", "-f", help="md, html or json to stdout; default: write report.md and "
                                   "report.html beside report.json")] = None,
    ) -> None:
        """Re-render a run's report.json (schema infertune.report/v1)."""
        if fmt is not None and fmt not in FORMATS:
            raise ConfigError(f"--format {fmt!r} is not supported; use one of "
                              f"{', '.join(FORMATS)}")
        folder = RunDir(run) if run.is_dir() else None
        path = folder.paths.report_json if folder is not None else run
        report = folder.report(Report) if folder is not None else Report.load_json(run)
        if fmt is not None:
            typer.echo(render(report, fmt), nl=False)
            return
        written = write_report(report, path.parent, formats=("md", "html"))
        for p in written.values():
            typer.echo(f"wrote {p}")
