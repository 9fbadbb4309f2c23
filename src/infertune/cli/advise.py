"""`infertune advise SCENARIO`: a ranked plan from the scenario alone; every figure is a
labelled estimate with its source. The report goes to stdout unless --out is given."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from infertune.cli.api import AdviseOptions, advise
from infertune.config import Scenario
from infertune.errors import ConfigError
from infertune.report.interview import interview
from infertune.report.render import FORMATS, render

ScenarioFile = Annotated[Path, typer.Argument(help="scenario YAML (the eight facts)")]
Interactive = Annotated[bool, typer.Option(
    "--interactive", "-i", help="ask for each missing fact")]
Format = Annotated[str, typer.Option("--format", "-f", help="md, html or json")]
Out = Annotated[Path | None, typer.Option("--out", "-o", help="write here, not to stdout")]
Measure = Annotated[str | None, typer.Option(
    "--measure", metavar="MODEL",
    help="measure MODEL on this machine and replace estimates where it can")]


@dataclass(frozen=True)
class AdviseCommand:
    """``infertune advise SCENARIO``: api.advise's options plus how to ask and print."""

    scenario: Path
    interactive: bool = False
    fmt: str = "md"
    out: Path | None = None
    measure: str | None = None

    def __post_init__(self) -> None:
        if self.fmt not in FORMATS:
            raise ConfigError(f"--format {self.fmt!r} is not supported; use one of "
                              f"{', '.join(FORMATS)}")


def advise_cmd(scenario: ScenarioFile, interactive: Interactive = False, fmt: Format = "md",
               out: Out = None, measure: Measure = None) -> None:
    """Advise from a scenario file alone: missing facts, diagnosis, ranked options, plan."""
    run(AdviseCommand(scenario, interactive, fmt, out, measure))


def register(app: typer.Typer) -> None:
    app.command("advise")(advise_cmd)


def run(command: AdviseCommand) -> None:
    """The advice (api.advise), rendered to stdout or ``command.out``."""

    report = advise(AdviseOptions(command.scenario, command.measure),
                    interview=_interview if command.interactive else None,
                    on_measure=_say_measuring)
    text = render(report, command.fmt)
    if command.out is None:
        typer.echo(text, nl=False)
        return
    command.out.parent.mkdir(parents=True, exist_ok=True)
    command.out.write_text(text)
    typer.echo(f"wrote {command.out}", err=True)


def _interview(scenario: Scenario) -> Scenario:
    return interview(scenario, ask=lambda q: typer.prompt(q, default="", show_default=False),
                     say=lambda line: typer.echo(line, err=True))


def _say_measuring(model: str) -> None:
    typer.echo(f"measuring {model} on this machine (about a minute and a half)...", err=True)
