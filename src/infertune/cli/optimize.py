"""`infertune optimize MODEL --scenario FILE [--data FILE] [--out runs/NAME] [--budget 10m]
[--quick] [--json] [--candidate MODEL ...]`: the whole job, into a run directory.

`infertune optimize --server-cmd "CMD {knob} --port {port}" --search knob=v1,v2 [--scenario
FILE]` tunes an OpenAI-compatible LLM server instead (cli/server_tune.py, optimize/server_tune/):
no MODEL, one server per candidate, ranked by measured goodput at the token-level SLO."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from infertune.cli._common import quiet_libraries
from infertune.config import load_scenario
from infertune.data import HeldOut, default_heldout, read_heldout
from infertune.durations import parse_duration
from infertune.errors import ConfigError
from infertune.optimize.costs import BudgetChoice
from infertune.optimize.run import DEFAULT_BUDGET_S, QUICK_BUDGET_S, OptimizeOptions, optimize
from infertune.optimize.state import RunPaths
from infertune.report.run_report import write_run_report

HELP = ("Profile MODEL, build the variants that apply on this machine, check each against the "
        "scenario's quality floor, measure the survivors against the baseline, sweep serving "
        "policies at the scenario's traffic, and write a ranked report (report.json, report.md, "
        "report.html) into a run directory. report.json names the recommended variant "
        "(recommendation.variant_id, a folder under variants/) and the serving policy "
        "(serving.policy) that `infertune serve` reads.")
MIN_BUDGET_S = 45.0  # setup + a quick profile + one variant screened + the report


def register(app: typer.Typer) -> None:
    @app.command("optimize", help=HELP)
    def optimize_cmd(
        model: Annotated[str | None, typer.Argument(
            help="Model reference, e.g. 'minilm' or a path (none with --server-cmd).")] = None,
        scenario: Annotated[Path | None, typer.Option(
            "--scenario", help="Scenario YAML file.")] = None,
        data: Annotated[Path | None, typer.Option(
            "--data", help="Held-out data (.jsonl/.csv/.npz); minilm defaults to its bundled "
            "set.")] = None,
        out: Annotated[Path | None, typer.Option(
            "--out", help="Run directory (default runs/<model>-<time>).")] = None,
        budget: Annotated[str | None, typer.Option(
            "--budget", help="Time budget for the whole run, e.g. 5m or 90s (default 5.5m; "
            "1.5m with --quick), or 'auto': sized from the model (its parameters, measured "
            "export and call times) to what a complete search needs here, at most 1h; the "
            "choice and its reasons are printed.")] = None,
        quick: Annotated[bool, typer.Option(
            "--quick", help="Fewer variants, shorter measurements.")] = False,
        as_json: Annotated[bool, typer.Option(
            "--json", help="Print report.json on stdout instead of the summary (progress "
            "stays on stderr); the run directory is written either way.")] = False,
        candidate: Annotated[list[str] | None, typer.Option(
            "--candidate", help="Another (smaller) model to measure and cascade; repeatable."
        )] = None,
        seed: Annotated[int, typer.Option(
            "--seed", help="Seed for the request sample, interleaving order and bootstrap CIs "
            "(same seed, same draws).")] = 0,
        overwrite: Annotated[bool, typer.Option(
            "--overwrite", help="Replace an earlier run in --out (default: refuse, so no run "
            "is lost by accident).")] = False,
        server_cmd: Annotated[str | None, typer.Option(
            "--server-cmd", help="Tune an LLM server: its command with {knob} placeholders and "
            "{port}, e.g. \"vllm serve M --port {port} --max-num-seqs {max_num_seqs}\"",
            rich_help_panel="LLM server tuning")] = None,
        search: Annotated[list[str] | None, typer.Option(
            "--search", help="KNOB=V1,V2,... for a {KNOB} of --server-cmd; repeatable "
            "(candidates: every combination)", rich_help_panel="LLM server tuning")] = None,
        slo: Annotated[str | None, typer.Option(
            "--slo", help="token-level SLOs, e.g. ttft_p95_ms=800,itl_p95_ms=60 (default: "
            "the scenario's)", rich_help_panel="LLM server tuning")] = None,
        rate: Annotated[float | None, typer.Option(
            "--rate", help="first rate of each sweep, req/s (default: the scenario's "
            "mean_rps, else 1)", rich_help_panel="LLM server tuning")] = None,
        probe_duration: Annotated[str, typer.Option(
            "--probe-duration", help="length of one open-loop probe",
            rich_help_panel="LLM server tuning")] = "10s",
        sweep_steps: Annotated[int, typer.Option(
            "--sweep-steps", help="most probes in one candidate's sweep",
            rich_help_panel="LLM server tuning")] = 4,
        api: Annotated[str, typer.Option(
            "--api", help="openai-chat | openai-completions",
            rich_help_panel="LLM server tuning")] = "openai-chat",
        shape: Annotated[str, typer.Option(
            "--shape", help="arrival shape of each probe (poisson, constant, gamma, ...)",
            rich_help_panel="LLM server tuning")] = "poisson",
        prompt_tokens: Annotated[int | None, typer.Option(
            "--prompt-tokens", help="words per user turn (default: the scenario's typical "
            "prompt_tokens, else 128)", rich_help_panel="LLM server tuning")] = None,
        output_tokens: Annotated[int | None, typer.Option(
            "--output-tokens", help="max_tokens per request (default: the scenario's, else "
            "64)", rich_help_panel="LLM server tuning")] = None,
        prompt_count: Annotated[int, typer.Option(
            "--prompt-count", help="distinct prompts (multi-turn: sessions x turns)",
            rich_help_panel="LLM server tuning")] = 512,
        prefix_tokens: Annotated[int, typer.Option(
            "--prefix-tokens", help="words of the shared system prompt",
            rich_help_panel="LLM server tuning")] = 0,
        prefix_share: Annotated[float, typer.Option(
            "--prefix-share", help="share of prompts (0..1) that start with the shared prefix",
            rich_help_panel="LLM server tuning")] = 0.0,
        turns: Annotated[int, typer.Option(
            "--turns", help="turns per session; each turn resends the history",
            rich_help_panel="LLM server tuning")] = 1,
        prompt_lengths: Annotated[str | None, typer.Option(
            "--prompt-lengths", help="user-turn lengths: N, uniform:LOW,HIGH or "
            "lognormal:MEDIAN,SIGMA", rich_help_panel="LLM server tuning")] = None,
        prompts: Annotated[Path | None, typer.Option(
            "--prompts", help="JSONL of your prompts: lengths resampled from theirs (needs "
            "--tokenizer)", rich_help_panel="LLM server tuning")] = None,
        tokenizer: Annotated[Path | None, typer.Option(
            "--tokenizer", help="local tokenizer folder (counts tokens of --prompts and of "
            "streamed text without usage)", rich_help_panel="LLM server tuning")] = None,
        warmup_requests: Annotated[int, typer.Option(
            "--warmup-requests", help="requests sent and dropped after each server start",
            rich_help_panel="LLM server tuning")] = 4,
        ready_path: Annotated[str | None, typer.Option(
            "--ready-path", help="GET path that answers 200 once the server is ready "
            "(default /v1/models)", rich_help_panel="LLM server tuning")] = None,
        ready_timeout: Annotated[float | None, typer.Option(
            "--ready-timeout", help="seconds to wait for a server to become ready (default "
            "300)", rich_help_panel="LLM server tuning")] = None,
        knob_check: Annotated[bool, typer.Option(
            "--knob-check/--no-knob-check", help="check knob flags of known runtimes",
            rich_help_panel="LLM server tuning")] = True,
        confirm_sessions: Annotated[int, typer.Option(
            "--confirm-sessions", help="fresh starts of the winner that confirm its figures "
            "(intervals across starts); 0 skips it and the figures stay one-window hints",
            rich_help_panel="LLM server tuning")] = 3,
        confirm_requests: Annotated[int, typer.Option(
            "--confirm-requests", help="requests per confirming start, at the chosen rate",
            rich_help_panel="LLM server tuning")] = 100,
    ) -> None:
        sc_or_none = load_scenario(scenario) if scenario is not None else None
        section = sc_or_none.server if sc_or_none is not None and model is None else None
        if server_cmd is not None or section is not None:
            from infertune.cli import server_tune

            if model is not None:
                raise ConfigError(f"--server-cmd tunes a running server, not MODEL {model!r}; "
                                  "drop MODEL (the command names what the server loads)")
            folder = out or Path("runs") / f"server-{time.strftime('%Y%m%d-%H%M%S')}"
            _claim(folder, overwrite)
            server_tune.run(server_tune.ServerArgs(
                server_cmd, search or [], slo, rate, probe_duration, sweep_steps, api, shape,
                prompt_tokens, output_tokens, prompt_count, prefix_tokens, prefix_share, turns,
                prompt_lengths, prompts, tokenizer, warmup_requests, ready_path, ready_timeout,
                knob_check, seed, confirm_sessions, confirm_requests), sc_or_none, folder,
                as_json)
            return
        if model is None or scenario is None:
            raise ConfigError("optimize needs MODEL and --scenario FILE (or --server-cmd to "
                              "tune an LLM server)")
        sc = sc_or_none or load_scenario(scenario)
        auto = budget is not None and budget.strip().lower() == "auto"
        budget_s = _budget(None if auto else budget, QUICK_BUDGET_S if quick else DEFAULT_BUDGET_S)
        held = _data(model, data)
        quiet_libraries()
        folder = out or Path("runs") / f"{Path(model).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
        _claim(folder, overwrite)
        options = OptimizeOptions(model=model, scenario=sc, data=held, out=folder,
                                  budget_s=budget_s, quick=quick, candidates=candidate or [],
                                  seed=seed, scenario_source=str(scenario), budget_auto=auto)
        with _Display(budget_s) as display:
            state = optimize(options, progress=display, on_budget=display.resized)
            display.stage("report", "writing report.json, report.md, report.html")
            report = write_run_report(state.paths.root)
        if as_json:
            typer.echo(state.paths.report_json.read_text(), nl=False)
        else:
            _summary(report, state.paths)


def _claim(folder: Path, overwrite: bool) -> None:
    """Refuse to mix a new run into an earlier one; with --overwrite, clear it first so no
    stale variant folder from the old run sits beside the new report."""
    if not folder.exists():
        return
    if not folder.is_dir():
        raise ConfigError(f"--out {folder} is a file; pass a folder for the run")
    if not any(folder.iterdir()):
        return
    if not overwrite:
        raise ConfigError(f"--out {folder} already holds files (an earlier run?); pass another "
                          "--out, or --overwrite to replace it")
    shutil.rmtree(folder)


def _budget(text: str | None, default: float) -> float:
    try:
        seconds = parse_duration(text, "--budget") if text is not None else default
    except ConfigError as exc:
        raise ConfigError(f"{exc}; or pass --budget auto to size it from the model") from exc
    if seconds < MIN_BUDGET_S:
        raise ConfigError(
            f"a budget of {seconds:g} s is too small to measure anything: optimize needs at "
            f"least {MIN_BUDGET_S:g} s (about 10 s to load and profile the baseline, 15 s to "
            "build and screen one variant, 10 s to time it against the baseline, 10 s for the "
            "report) and about 5 minutes for a full run; pass --budget 1m with --quick, or "
            "--budget 5m")
    return seconds


def _data(model: str, path: Path | None) -> HeldOut:
    if path is not None:
        return read_heldout(path)
    if model == "minilm":
        return default_heldout()
    raise ConfigError(f"no held-out data for {model!r}; pass --data with a .jsonl, .csv or "
                      ".npz file of typical inputs (the bundled set is for minilm only)")


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


def _summary(report: dict[str, Any], paths: RunPaths) -> None:
    console = Console()
    rec = report.get("recommendation") or {}
    console.print(f"[bold]{report['problem']['statement']}[/]")
    table = Table(title="Variants (batch 1, held-out inputs)", title_justify="left")
    for col in ("variant", "p50 ms", "p95 ms", "p99 ms", "quality", "verdict"):
        table.add_column(col)
    for row in report.get("variants", []):
        lat = row["latency"]
        q = row.get("quality")
        table.add_row(row["variant_id"], *(_fig(lat.get(k)) for k in ("p50", "p95", "p99")),
                      _fig(q), row.get("quality_verdict", ""))
    console.print(table)
    serving = report.get("serving") or {}
    if serving:
        console.print(f"serving policy: {serving.get('policy_id')}")
    console.print(f"recommendation: [bold]{rec.get('variant_id')}[/] — {rec.get('reason', '')}")
    for opt in report.get("options", [])[:5]:
        console.print(f"  - {opt['title']} (effort {opt['effort']['level']}, risk "
                      f"{opt['risk']['level']}, {opt['source']})")
    for note in report.get("notes", []):
        if note.startswith("not measured"):
            console.print(f"[yellow]{note}[/]")
    console.print(f"report: {paths.report_html.resolve()}")


def _fig(fig: dict[str, Any] | None) -> str:
    if not fig:
        return "n/a"
    if fig.get("value") is not None:
        return f"{fig['value']:.4g}"
    return f"{fig['low']:.3g}..{fig['high']:.3g}"
