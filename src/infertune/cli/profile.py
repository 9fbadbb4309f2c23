"""`infertune profile MODEL [--data FILE] [--batch-sizes 1,8,32] [--json OUT]`: measure where
the baseline's time goes (stages, tail, cold start, utilisation, batch curve, hotspots,
padding) and print a short diagnosis."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from infertune.cli._common import quiet_libraries
from infertune.data import default_heldout, read_heldout
from infertune.errors import ConfigError
from infertune.hardware import detect
from infertune.jsonfile import write_json
from infertune.measure.profile import ProfileSettings, profile
from infertune.models import BUILTIN, load


def parse_batch_sizes(text: str) -> tuple[int, ...]:
    """'1,8,32' -> (1, 8, 32); anything else is one ConfigError line with the fix."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        sizes = tuple(int(p) for p in parts)
    except ValueError:
        sizes = ()
    if not sizes or any(s < 1 for s in sizes):
        raise ConfigError(f"--batch-sizes {text!r} is not a list of integers >= 1; "
                          "pass e.g. --batch-sizes 1,8,32")
    return tuple(sorted(set(sizes)))


@contextmanager
def progress_bars() -> Iterator[Any]:
    """A rich progress display on stderr; yields a ``(step, done, total)`` callback."""

    tasks: dict[str, TaskID] = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=False) as bars:

        def update(step: str, done: int, total: int) -> None:
            if step not in tasks:
                tasks[step] = bars.add_task(step, total=max(total, 1))
            bars.update(tasks[step], completed=done, total=max(total, 1))

        yield update


def load_data(model: str, data: Path | None, adapter: Any) -> tuple[list[Any], str]:
    if data is not None:
        held = read_heldout(data)
        return list(held.inputs), held.source
    if model == BUILTIN:
        held = default_heldout()
        return list(held.inputs), held.source
    return adapter.sample_inputs(64), "synthetic: the model's sample_inputs(64) (no --data given)"


HELP = ("Measure the model where it runs: per-stage latency with p50/p95/p99 and shares, tail "
        "source, cold start, CPU/memory/GPU utilisation, the batch-size service curve, top "
        "operators and padding waste.")

Model = Annotated[str, typer.Argument(help="model reference: minilm, a folder, .onnx")]
Data = Annotated[Path | None, typer.Option(
    "--data", help="held-out inputs (.jsonl/.csv/.npz); defaults to the bundled set for minilm")]
BatchSizes = Annotated[str, typer.Option(
    "--batch-sizes", help="batch sizes for the service curve, e.g. 1,8,32")]
JsonOut = Annotated[Path | None, typer.Option(
    "--json", help="write profile.json (schema infertune.profile/v1) here")]
Requests = Annotated[int | None, typer.Option(
    "--requests", min=2, help="single requests timed for the stage breakdown (default 1000; "
    "100 with --quick)")]
CurveRepeats = Annotated[int | None, typer.Option(
    "--curve-repeats", min=1, help="timed forward calls per curve point, at most (default 10; "
    "3 with --quick)")]
ColdStart = Annotated[bool, typer.Option(
    "--cold-start/--no-cold-start", help="measure cold start in a fresh process")]
Quick = Annotated[bool, typer.Option(
    "--quick", help="a short run: 100 requests, 3 repeats per curve point, tight time caps "
    "(tail figures rest on few samples)")]
Seed = Annotated[int, typer.Option("--seed", help="seed for the bootstrap CIs")]


@dataclass(frozen=True)
class ProfileOptions:
    """``infertune profile MODEL``: explicit ``requests`` / ``curve_repeats`` win over
    ``quick``'s values."""

    model: str
    data: Path | None = None
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    json_out: Path | None = None
    requests: int | None = None
    curve_repeats: int | None = None
    cold_start: bool = True
    quick: bool = False
    seed: int = 0

    def settings(self) -> ProfileSettings:
        build = ProfileSettings.quick if self.quick else ProfileSettings
        given = {} if self.curve_repeats is None else {"curve_repeats": self.curve_repeats}
        if self.requests is not None:
            given.update(requests=self.requests, rounds=min(4, self.requests // 2))
        return build(batch_sizes=self.batch_sizes, cold_start=self.cold_start, seed=self.seed,
                     **given)


def profile_cmd(model: Model, data: Data = None, batch_sizes: BatchSizes = "1,2,4,8,16,32",
                json_out: JsonOut = None, requests: Requests = None,
                curve_repeats: CurveRepeats = None, cold_start: ColdStart = True,
                quick: Quick = False, seed: Seed = 0) -> None:
    run(ProfileOptions(model, data, parse_batch_sizes(batch_sizes), json_out, requests,
                       curve_repeats, cold_start, quick, seed))


def register(app: typer.Typer) -> None:
    app.command("profile", help=HELP)(profile_cmd)


def run(options: ProfileOptions) -> None:
    """Profile the model on its held-out inputs, write profile.json, print the summary."""

    settings = options.settings()
    quiet_libraries()
    adapter = load(options.model)
    inputs, source = load_data(options.model, options.data, adapter)
    with progress_bars() as update:
        result = profile(adapter, inputs, settings=settings, model_ref=options.model,
                         data_source=source, progress=update, hardware=detect().to_dict())
    if options.json_out is not None:
        write_json(options.json_out, result.to_dict())
    print_summary(result, options.json_out)


def print_summary(result: Any, json_out: Path | None) -> None:
    console = Console()
    stages = result.stages
    table = Table(title=f"{result.model['id']} on {result.data_count} inputs "
                  f"({result.stages.summaries['e2e'].count} single requests)",
                  title_justify="left")
    for col in ("stage", "p50 ms", "p95 ms", "p99 ms", "share of p50", "share of p99"):
        table.add_column(col, justify="left" if col == "stage" else "right")
    for name, summ in stages.summaries.items():
        s50 = f"{stages.share_p50[name]:.0f}%" if name in stages.share_p50 else "100%"
        s99 = f"{stages.share_p99[name]:.0f}%" if name in stages.share_p99 else "100%"
        table.add_row(name, f"{summ.p50:.2f}", f"{summ.p95:.2f}", f"{summ.p99:.2f}", s50, s99)
    console.print(table)
    curve = result.curve
    seq = curve.typical_seq_len
    row = ", ".join(f"b{b} {curve.latency_ms(b, seq):.1f} ms" for b in curve.batch_sizes)
    console.print(f"forward by batch size{f' at {seq} tokens' if seq else ''}: {row}")
    for line in result.diagnosis:
        console.print(f"- {line}", highlight=False)
    for part, why in result.skipped.items():
        console.print(f"- not measured: {part} ({why})", highlight=False)
    if json_out is not None:
        console.print(f"profile written to {json_out} ({result.seconds:.0f} s)")
