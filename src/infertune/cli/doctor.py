"""`infertune doctor [--json] [--hardware FILE]`: what this machine is (or the machine a
hardware.json describes), which optimization families apply, and which engines and precisions
infertune can build here and why (or what it would take), as the passes' own facts say."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from infertune.errors import ConfigError
from infertune.hardware import LIBRARIES, HardwareInfo, applicability, detect
from infertune.jsonfile import read_json
from infertune.optimize.passes.registry import engines_on


def register(app: typer.Typer) -> None:
    @app.command(
        "doctor",
        short_help="This machine: cores, quota, CPU flags, GPUs, and which optimizations apply.",
        help="Show this machine: Python and library versions, cores and cgroup CPU quota, "
        "memory, the CPU flags that decide which optimizations pay off (avx2, avx512, VNNI, "
        "BF16, AMX, NEON), GPUs, and which optimization families apply here and why.",
    )
    def doctor(
        as_json: bool = typer.Option(
            False, "--json", help="Print the hardware.json document (schema "
            "infertune.hardware/v1) on stdout instead of the table."),
        hardware: Annotated[Path | None, typer.Option(
            "--hardware", help="Describe the machine in this hardware.json (e.g. a run's, or "
            "`infertune doctor --json` saved on the production host) instead of this one.")
        ] = None,
    ) -> None:
        hw = detect() if hardware is None else read_hardware(hardware)
        if as_json:
            data = hw.to_dict() | {"engines": [v.to_dict() for v in engines_on(hw)]}
            typer.echo(json.dumps(data, indent=2))
            return
        _print_tables(hw, "This machine" if hardware is None else f"The machine in {hardware}")
        _print_engines(hw)


def read_hardware(path: Path) -> HardwareInfo:
    data = read_json(path, fix="pass --hardware a file written by `infertune doctor --json`")
    if not isinstance(data, dict):
        raise ConfigError(f"--hardware {path} must hold a JSON object as `infertune doctor "
                          "--json` writes it")
    return HardwareInfo.from_dict(data)


def _print_tables(hw: HardwareInfo, title: str) -> None:
    console = Console()
    machine = Table(title=title, show_header=False, title_justify="left")
    machine.add_column("fact", style="bold")
    machine.add_column("value")
    quota = f"{hw.cpu_quota} CPUs" if hw.cpu_quota is not None else "none"
    memory = f"{hw.memory_gb} GB" + (
        f" (cgroup limit {hw.memory_limit_gb} GB)" if hw.memory_limit_gb is not None else "")
    gpus = ", ".join(f"{g.name} {g.memory_gb} GB (driver {g.driver})" for g in hw.gpus)
    rows = [
        ("CPU", hw.cpu_model),
        ("logical cores", str(hw.logical_cores)),
        ("cgroup CPU quota", quota),
        ("effective cores", str(hw.effective_cores)),
        ("memory", memory),
        ("CPU flags", " ".join(hw.flags) or "none of the relevant ones"),
        ("GPUs", gpus or "none"),
        ("Python", f"{hw.python} on {hw.platform}"),
    ]
    rows += [(name, hw.libraries.get(name, "not installed")) for name in LIBRARIES]
    for fact, value in rows:
        machine.add_row(fact, value)
    console.print(machine)

    families = Table(title="Optimization families on this machine", title_justify="left")
    families.add_column("family", style="bold")
    families.add_column("verdict")
    families.add_column("why")
    for item in applicability(hw):
        verdict = "[green]applicable[/]" if item.applicable else "[yellow]not applicable[/]"
        families.add_row(item.family, verdict, item.reason)
    console.print(families)


def _print_engines(hw: HardwareInfo) -> None:
    table = Table(title="Engines and precisions infertune can build here", title_justify="left")
    table.add_column("engine", style="bold")
    table.add_column("device")
    table.add_column("verdict")
    table.add_column("why, or what it would take")
    table.add_column("passes")
    for v in engines_on(hw):
        verdict = "[green]applies[/]" if v.applies else "[yellow]not here[/]"
        table.add_row(v.engine, v.device, verdict, escape(v.why), ", ".join(v.passes))
    Console().print(table)
