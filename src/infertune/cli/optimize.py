"""`infertune optimize MODEL --scenario FILE [--data FILE] [--out runs/NAME] [--budget 10m]
[--quick] [--json] [--candidate MODEL ...]`: the whole job, into a run directory.

`infertune optimize --server-cmd "CMD {knob} --port {port}" --search knob=v1,v2 [--scenario
FILE]` tunes an OpenAI-compatible LLM server instead (cli/server_tune.py, optimize/server_tune/):
no MODEL, one server per candidate, ranked by measured goodput at the token-level SLO."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from infertune.cli import server_tune
from infertune.cli.api import (
    OptimizeOptions,
    OptimizeResult,
    budget_seconds,
    claim_run_folder,
    optimize,
)
from infertune.cli.server_tune import ServerArgs
from infertune.config import Scenario, load_scenario
from infertune.errors import ConfigError
from infertune.jsonfile import json_text
from infertune.optimize.search.costs import BudgetChoice
from infertune.report.schema import Figure, Report

HELP = ("Profile MODEL, build the variants that apply on this machine, check each against the "
        "scenario's quality floor, measure the survivors against the baseline, sweep serving "
        "policies at the scenario's traffic, and write a ranked report (report.json, report.md, "
        "report.html) into a run directory. report.json names the recommended variant "
        "(recommendation.variant_id, a folder under variants/) and the serving policy "
        "(serving.policy) that `infertune serve` reads.")
LLM = "LLM server tuning"  # the help panel of the --server-cmd options

Model = Annotated[str | None, typer.Argument(
    help="Model reference, e.g. 'minilm' or a path (none with --server-cmd).")]
ScenarioFile = Annotated[Path | None, typer.Option("--scenario", help="Scenario YAML file.")]
Data = Annotated[Path | None, typer.Option(
    "--data", help="Held-out data (.jsonl/.csv/.npz); minilm defaults to its bundled set.")]
Out = Annotated[Path | None, typer.Option(
    "--out", help="Run directory (default runs/<model>-<time>).")]
Budget = Annotated[str | None, typer.Option(
    "--budget", help="Time budget for the whole run, e.g. 5m or 90s (default 5.5m; 1.5m with "
    "--quick), or 'auto': sized from the model (its parameters, measured export and call "
    "times) to what a complete search needs here, at most 1h; the choice and its reasons are "
    "printed.")]
Quick = Annotated[bool, typer.Option("--quick", help="Fewer variants, shorter measurements.")]
AsJson = Annotated[bool, typer.Option(
    "--json", help="Print report.json on stdout instead of the summary (progress stays on "
    "stderr); the run directory is written either way.")]
Candidate = Annotated[list[str] | None, typer.Option(
    "--candidate", help="Another (smaller) model to measure and cascade; repeatable.")]
Seed = Annotated[int, typer.Option(
    "--seed", help="Seed for the request sample, interleaving order and bootstrap CIs (same "
    "seed, same draws).")]
Overwrite = Annotated[bool, typer.Option(
    "--overwrite", help="Replace an earlier run in --out (default: refuse, so no run is lost "
    "by accident).")]
ServerCmd = Annotated[str | None, typer.Option(
    "--server-cmd", help="Tune an LLM server: its command with {knob} placeholders and {port}, "
    "e.g. \"vllm serve M --port {port} --max-num-seqs {max_num_seqs}\"", rich_help_panel=LLM)]
Search = Annotated[list[str] | None, typer.Option(
    "--search", help="KNOB=V1,V2,... for a {KNOB} of --server-cmd; repeatable (candidates: "
    "every combination)", rich_help_panel=LLM)]
Slo = Annotated[str | None, typer.Option(
    "--slo", help="token-level SLOs, e.g. ttft_p95_ms=800,itl_p95_ms=60 (default: the "
    "scenario's)", rich_help_panel=LLM)]
Rate = Annotated[float | None, typer.Option(
    "--rate", help="first rate of each sweep, req/s (default: the scenario's mean_rps, else 1)",
    rich_help_panel=LLM)]
ProbeDuration = Annotated[str, typer.Option(
    "--probe-duration", help="length of one open-loop probe", rich_help_panel=LLM)]
SweepSteps = Annotated[int, typer.Option(
    "--sweep-steps", help="most probes in one candidate's sweep", rich_help_panel=LLM)]
Api = Annotated[str, typer.Option(
    "--api", help="openai-chat | openai-completions", rich_help_panel=LLM)]
Shape = Annotated[str, typer.Option(
    "--shape", help="arrival shape of each probe (poisson, constant, gamma, ...)",
    rich_help_panel=LLM)]
PromptTokens = Annotated[int | None, typer.Option(
    "--prompt-tokens", help="words per user turn (default: the scenario's typical "
    "prompt_tokens, else 128)", rich_help_panel=LLM)]
OutputTokens = Annotated[int | None, typer.Option(
    "--output-tokens", help="max_tokens per request (default: the scenario's, else 64)",
    rich_help_panel=LLM)]
PromptCount = Annotated[int, typer.Option(
    "--prompt-count", help="distinct prompts (multi-turn: sessions x turns)",
    rich_help_panel=LLM)]
PrefixTokens = Annotated[int, typer.Option(
    "--prefix-tokens", help="words of the shared system prompt", rich_help_panel=LLM)]
PrefixShare = Annotated[float, typer.Option(
    "--prefix-share", help="share of prompts (0..1) that start with the shared prefix",
    rich_help_panel=LLM)]
Turns = Annotated[int, typer.Option(
    "--turns", help="turns per session; each turn resends the history", rich_help_panel=LLM)]
PromptLengths = Annotated[str | None, typer.Option(
    "--prompt-lengths", help="user-turn lengths: N, uniform:LOW,HIGH or lognormal:MEDIAN,SIGMA",
    rich_help_panel=LLM)]
Prompts = Annotated[Path | None, typer.Option(
    "--prompts", help="JSONL of your prompts: lengths resampled from theirs (needs "
    "--tokenizer)", rich_help_panel=LLM)]
Tokenizer = Annotated[Path | None, typer.Option(
    "--tokenizer", help="local tokenizer folder (counts tokens of --prompts and of streamed "
    "text without usage)", rich_help_panel=LLM)]
WarmupRequests = Annotated[int, typer.Option(
    "--warmup-requests", help="requests sent and dropped after each server start",
    rich_help_panel=LLM)]
ReadyPath = Annotated[str | None, typer.Option(
    "--ready-path", help="GET path that answers 200 once the server is ready (default "
    "/v1/models)", rich_help_panel=LLM)]
ReadyTimeout = Annotated[float | None, typer.Option(
    "--ready-timeout", help="seconds to wait for a server to become ready (default 300)",
    rich_help_panel=LLM)]
KnobCheck = Annotated[bool, typer.Option(
    "--knob-check/--no-knob-check", help="check knob flags of known runtimes",
    rich_help_panel=LLM)]
ConfirmSessions = Annotated[int, typer.Option(
    "--confirm-sessions", help="fresh starts of the winner that confirm its figures "
    "(intervals across starts); 0 skips it and the figures stay one-window hints",
    rich_help_panel=LLM)]
ConfirmRequests = Annotated[int, typer.Option(
    "--confirm-requests", help="requests per confirming start, at the chosen rate",
    rich_help_panel=LLM)]


@dataclass(frozen=True)
class ServerTuning:
    """``infertune optimize --server-cmd ...`` (or a scenario's ``server:`` section): one
    server per candidate, into ``out`` (default runs/server-<time>)."""

    args: ServerArgs
    scenario: Scenario | None
    out: Path | None = None
    overwrite: bool = False
    as_json: bool = False
    model: str | None = None  # refused: the command names what the server loads

    def __post_init__(self) -> None:
        if self.model is not None:
            raise ConfigError(f"--server-cmd tunes a running server, not MODEL {self.model!r}; "
                              "drop MODEL (the command names what the server loads)")


def optimize_cmd(model: Model = None, scenario: ScenarioFile = None, data: Data = None,
                 out: Out = None, budget: Budget = None, quick: Quick = False,
                 as_json: AsJson = False, candidate: Candidate = None, seed: Seed = 0,
                 overwrite: Overwrite = False, server_cmd: ServerCmd = None,
                 search: Search = None, slo: Slo = None, rate: Rate = None,
                 probe_duration: ProbeDuration = "10s", sweep_steps: SweepSteps = 4,
                 api: Api = "openai-chat", shape: Shape = "poisson",
                 prompt_tokens: PromptTokens = None, output_tokens: OutputTokens = None,
                 prompt_count: PromptCount = 512, prefix_tokens: PrefixTokens = 0,
                 prefix_share: PrefixShare = 0.0, turns: Turns = 1,
                 prompt_lengths: PromptLengths = None, prompts: Prompts = None,
                 tokenizer: Tokenizer = None, warmup_requests: WarmupRequests = 4,
                 ready_path: ReadyPath = None, ready_timeout: ReadyTimeout = None,
                 knob_check: KnobCheck = True, confirm_sessions: ConfirmSessions = 3,
                 confirm_requests: ConfirmRequests = 100) -> None:
    sc = load_scenario(scenario) if scenario is not None else None
    if server_cmd is not None or (sc is not None and model is None and sc.server is not None):
        tune_server(ServerTuning(ServerArgs(
            server_cmd, search or [], slo, rate, probe_duration, sweep_steps, api, shape,
            prompt_tokens, output_tokens, prompt_count, prefix_tokens, prefix_share, turns,
            prompt_lengths, prompts, tokenizer, warmup_requests, ready_path, ready_timeout,
            knob_check, seed, confirm_sessions, confirm_requests), sc, out, overwrite, as_json,
            model))
        return
    if model is None or scenario is None:
        raise ConfigError("optimize needs MODEL and --scenario FILE (or --server-cmd to tune "
                          "an LLM server)")
    run(OptimizeOptions(model, scenario, data=data, out=out, budget=budget, quick=quick,
                        candidates=tuple(candidate or ()), seed=seed, overwrite=overwrite),
        as_json=as_json)


def tune_server(tuning: ServerTuning) -> None:
    folder = tuning.out or Path("runs") / f"server-{time.strftime('%Y%m%d-%H%M%S')}"
    claim_run_folder(folder, tuning.overwrite)
    server_tune.run(tuning.args, tuning.scenario, folder, tuning.as_json)


def run(options: OptimizeOptions, *, as_json: bool = False) -> None:
    """Optimize through ``api.optimize`` with a progress display on stderr, then print
    report.json (``as_json``) or the summary."""
    with _Display(budget_seconds(options)) as display:
        result = optimize(options, progress=display, on_budget=display.resized)
    if as_json:
        # the typed report optimize read back through RunDir, as report.json holds it
        typer.echo(json_text(result.report.to_dict()), nl=False)
    else:
        _summary(result)


def register(app: typer.Typer) -> None:
    app.command("optimize", help=HELP)(optimize_cmd)


class _Display:
    """rich progress on stderr: stage, current step and the time left."""

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self.started = time.monotonic()
        self.console = Console(stderr=True)
        self.progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.fields[stage]}"),
                                 TextColumn("{task.description}"), TimeElapsedColumn(),
                                 TextColumn("{task.fields[left]}"), console=self.console,
                                 transient=True)
        self.task = self.progress.add_task("", stage="starting", left="")
        self._stage = "starting"

    def __enter__(self) -> _Display:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def resized(self, choice: BudgetChoice) -> None:
        """--budget auto sized (or re-sized) the budget: say what it chose and why."""
        self.budget_s = choice.seconds
        self.console.print(f"[bold]budget:[/] {choice.reason}")

    def _left(self) -> str:
        left = max(0.0, self.budget_s - (time.monotonic() - self.started))
        return f"{left:.0f} s of budget left"

    def stage(self, name: str, detail: str = "") -> None:
        self._stage = name
        self.console.print(f"[dim]stage:[/] {name} ({self._left()})")
        self.progress.update(self.task, stage=name, description=detail, left=self._left())

    def tick(self, detail: str = "") -> None:
        self.progress.update(self.task, description=detail[:70], left=self._left())


def _summary(result: OptimizeResult) -> None:
    console = Console()
    report = result.report
    console.print(f"[bold]{report.problem.statement}[/]")
    console.print(_variant_table(report))
    if report.serving is not None:
        console.print(f"serving policy: {report.serving.policy_id}")
    rec = report.recommendation
    console.print(f"recommendation: [bold]{rec.variant_id if rec else None}[/] — "
                  f"{rec.reason if rec else ''}")
    for opt in report.options[:5]:
        console.print(f"  - {opt.title} (effort {opt.effort.level}, risk {opt.risk.level}, "
                      f"{opt.source})")
    for note in report.notes:
        if note.startswith("not measured"):
            console.print(f"[yellow]{note}[/]")
    console.print(f"report: {result.report_html.resolve()}")


def _variant_table(report: Report) -> Table:
    table = Table(title="Variants (batch 1, held-out inputs)", title_justify="left")
    for col in ("variant", "p50 ms", "p95 ms", "p99 ms", "quality", "verdict"):
        table.add_column(col)
    for row in report.variants:
        lat = row.latency
        table.add_row(row.variant_id, _fig(lat.p50), _fig(lat.p95), _fig(lat.p99),
                      _fig(row.quality), row.quality_verdict)
    return table


def _fig(fig: Figure | None) -> str:
    if fig is None:
        return "n/a"
    if fig.value is not None:
        return f"{fig.value:.4g}"
    return f"{fig.low:.3g}..{fig.high:.3g}"
