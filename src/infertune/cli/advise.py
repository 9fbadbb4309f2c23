"""`infertune advise SCENARIO`: a ranked plan from the scenario alone; every figure is a
labelled estimate with its source. The report goes to stdout unless --out is given."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from infertune.errors import ConfigError


def register(app: typer.Typer) -> None:
    @app.command("advise")
    def advise_cmd(
        scenario: Annotated[Path, typer.Argument(help="scenario YAML (the eight facts)")],
        interactive: Annotated[bool, typer.Option(
            "--interactive", "-i", help="ask for each missing fact")] = False,
        fmt: Annotated[str, typer.Option("--format", "-f", help="md, html or json")] = "md",
        out: Annotated[Path | None, typer.Option(
            "--out", "-o", help="write here, not to stdout")] = None,
        measure: Annotated[str | None, typer.Option(
            "--measure", metavar="MODEL",
            help="measure MODEL on this machine and replace estimates where it can")] = None,
    ) -> None:
        """Advise from a scenario file alone: missing facts, diagnosis, ranked options, plan."""
        from infertune.config import load_scenario
        from infertune.report.advisor import advise
        from infertune.report.render import FORMATS, render
        from infertune.report.vague import VagueReadings

        if fmt not in FORMATS:
            raise ConfigError(f"--format {fmt!r} is not supported; use one of "
                              f"{', '.join(FORMATS)}")
        readings = VagueReadings()  # "50ms", "about 50", "~20", "spiky at lunch"
        sc = load_scenario(scenario, prepare=readings.read)
        if interactive:
            from infertune.report.interview import interview

            sc = interview(sc, ask=lambda q: typer.prompt(q, default="", show_default=False),
                           say=lambda line: typer.echo(line, err=True))
        report = advise(sc)
        if measure is not None:
            from infertune.cli._common import quiet_libraries
            from infertune.optimize.quickcheck import check_variants
            from infertune.report.measured import add_measurements

            quiet_libraries()
            typer.echo(f"measuring {measure} on this machine (about a minute and a half)...",
                       err=True)

            report = add_measurements(report, sc, measure, check=check_variants)
        if readings.assumptions:  # each vague value, as read, is an assumption of the advice
            report = report.model_copy(
                update={"assumptions": readings.assumptions + report.assumptions})
        text = render(report, fmt)
        if out is None:
            typer.echo(text, nl=False)
            return
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        typer.echo(f"wrote {out}", err=True)
