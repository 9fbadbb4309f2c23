"""`infertune optimize --server-cmd "CMD {knob}" --search knob=v1,v2 [--scenario FILE]`: the
server-tuning branch of optimize (optimize/server_tune/). This module only turns the options
and the scenario into TuneOptions, checks them all before any server starts, and prints the
ranked table; server_tune.json and server_tune.md land in --out."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from infertune.cli.loadtest_stream import _token_counter
from infertune.config import Scenario, ServerTuning
from infertune.durations import parse_duration
from infertune.errors import ConfigError
from infertune.loadgen.openai import APIS, Api, TokenCounter
from infertune.loadgen.streaming_result import TokenSLO, parse_slos
from infertune.loadgen.workloads import LengthDist, WorkloadSpec, lengths_from_file, parse_lengths
from infertune.optimize.server_tune.command import ServerCommand, parse_search
from infertune.optimize.server_tune.tune_report import ServerTuneReport
from infertune.optimize.server_tune.tuner import TuneOptions, tune


@dataclass(frozen=True)
class ServerArgs:
    """The --server-cmd options of one optimize call."""

    server_cmd: str | None  # None: the scenario's server section
    search: list[str]
    slo: str | None
    rate: float | None
    probe_duration: str
    sweep_steps: int
    api: str
    shape: str
    prompt_tokens: int | None
    output_tokens: int | None
    prompt_count: int
    prefix_tokens: int
    prefix_share: float
    turns: int
    prompt_lengths: str | None
    prompts: Path | None
    tokenizer: Path | None
    warmup_requests: int
    ready_path: str | None  # None: the scenario's server section, else /v1/models
    ready_timeout_s: float | None
    knob_check: bool
    seed: int
    confirm_sessions: int = 3
    confirm_requests: int = 100


def with_section(args: ServerArgs, section: ServerTuning | None) -> ServerArgs:
    """The scenario's ``server:`` section filled in where the command line gave nothing."""
    if section is None:
        return replace(args, ready_path=args.ready_path or "/v1/models",
                       ready_timeout_s=args.ready_timeout_s or 300.0)
    search = args.search or [f"{k}={','.join(str(v) for v in values)}"
                             for k, values in section.search.items()]
    return replace(args, server_cmd=args.server_cmd or section.command, search=search,
                   ready_path=args.ready_path or section.ready_path,
                   ready_timeout_s=args.ready_timeout_s or section.ready_timeout_s)


def slos_of(args: ServerArgs, scenario: Scenario | None) -> list[TokenSLO]:
    """--slo, else the scenario's token-level SLO."""

    if args.slo:
        return parse_slos(args.slo)
    targets = scenario.slo.token_targets() if scenario is not None else {}
    if not targets:
        raise ConfigError("--server-cmd needs token-level SLOs to sweep against: pass --slo "
                          "ttft_p95_ms=800,itl_p95_ms=60, or set slo.ttft_p95_ms / "
                          "slo.itl_p95_ms in the --scenario")
    return parse_slos(",".join(f"{k}_ms={v:g}" for k, v in targets.items()))


def _lengths(args: ServerArgs, counter: TokenCounter | None) -> tuple[LengthDist | None, str]:
    if args.prompts is not None and args.prompt_lengths is not None:
        raise ConfigError("--prompts and --prompt-lengths both set the prompt lengths; "
                          "pass one")
    if args.prompts is not None:
        if counter is None:
            raise ConfigError("--prompts (lengths from your prompts) needs --tokenizer DIR to "
                              "count their tokens")
        return (lengths_from_file(args.prompts, counter),
                f"resampled from the token lengths of {args.prompts}")
    if args.prompt_lengths is not None:
        return parse_lengths(args.prompt_lengths), args.prompt_lengths
    return None, "fixed"


def build_options(args: ServerArgs, scenario: Scenario | None, out: Path) -> TuneOptions:
    """TuneOptions from the options and the scenario; every check happens here."""
    args = with_section(args, scenario.server if scenario is not None else None)
    assert args.server_cmd is not None and args.ready_path is not None
    assert args.ready_timeout_s is not None

    command = _server_command(args)
    api = _checked_api(args)
    counter = _token_counter(args.tokenizer) if args.tokenizer is not None else None
    lengths, label = _lengths(args, counter)
    workload = _workload(args, scenario, lengths)
    start = _start_rate(args, scenario)
    return TuneOptions(
        command=command, slos=slos_of(args, scenario), workload=workload, out=out, api=api,
        start_rate=start, max_steps=args.sweep_steps,
        probe_s=parse_duration(args.probe_duration, "--probe-duration"),
        warmup_requests=args.warmup_requests, shape=args.shape, ready_path=args.ready_path,
        ready_timeout_s=args.ready_timeout_s, seed=args.seed,
        cost_per_hour_usd=scenario.deployment.cost_per_hour_usd if scenario else None,
        count_tokens=counter, lengths_label=label, confirm_sessions=args.confirm_sessions,
        confirm_requests=args.confirm_requests)


def _server_command(args: ServerArgs) -> ServerCommand:
    if not args.search:
        raise ConfigError("--server-cmd needs --search KNOB=V1,V2,... (e.g. "
                          "--search max_num_seqs=1,4,16) naming its {knob} placeholders")
    assert args.server_cmd is not None
    return ServerCommand(args.server_cmd, parse_search(args.search),
                         knob_check=args.knob_check)


def _checked_api(args: ServerArgs) -> Api:
    """The streaming API, once the sweep's and the confirmation's limits are checked."""

    api = next((a for a in APIS if a == args.api), None)
    if api is None:
        raise ConfigError(f"--api {args.api!r}: server tuning streams tokens; use "
                          f"{' or '.join(APIS)}")
    if args.sweep_steps < 1 or args.warmup_requests < 0:
        raise ConfigError("--sweep-steps must be >= 1 and --warmup-requests >= 0")
    if args.confirm_sessions not in (0, *range(2, 101)) or args.confirm_requests < 1:
        raise ConfigError(f"--confirm-sessions {args.confirm_sessions} / --confirm-requests "
                          f"{args.confirm_requests}: pass 0 starts (no confirmation) or 2 or "
                          "more (an interval across starts needs two), and >= 1 request each")
    return api


def _workload(args: ServerArgs, scenario: Scenario | None,
              lengths: LengthDist | None) -> WorkloadSpec:
    """The prompt mix; lengths left out come from the scenario's typical input."""

    typical = scenario.inputs.typical if scenario is not None else None
    return WorkloadSpec(
        prompt_tokens=args.prompt_tokens or (typical.prompt_tokens if typical and
                                             typical.prompt_tokens else 128),
        output_tokens=args.output_tokens or (typical.output_tokens if typical and
                                             typical.output_tokens else 64),
        count=args.prompt_count, prefix_tokens=args.prefix_tokens,
        prefix_share=args.prefix_share, turns=args.turns, lengths=lengths,
        seed=args.seed)


def _start_rate(args: ServerArgs, scenario: Scenario | None) -> float:
    traffic = scenario.traffic.mean_rps if scenario is not None else None
    start = args.rate if args.rate is not None else (traffic or 1.0)
    if not start > 0:
        raise ConfigError(f"--rate must be > 0, got {start}")
    return start


def run(args: ServerArgs, scenario: Scenario | None, out: Path, as_json: bool) -> None:
    options = build_options(args, scenario, out)
    console = Console(stderr=True)
    report = tune(options, progress=lambda line: console.print(f"[dim]{line}[/]"))
    if as_json:
        typer.echo((out / "server_tune.json").read_text(), nl=False)
    else:
        print_table(report)
        typer.echo(f"report: {(out / 'server_tune.md').resolve()}")


def print_table(report: ServerTuneReport) -> None:
    """The ranked candidates, as the markdown report's table (benchmarks/llm_tune.py too)."""

    console = Console()
    if not console.is_terminal:  # a pipe or a log file: no 80-column squeeze of the figures
        console = Console(width=160)
    table = Table("#", "config", "goodput@SLO req/s", "rate", "TTFT p95 ms [CI]",
                  "ITL p95 ms [CI]", "cost/1k", "RSS MiB", "round",
                  title=f"{report.command_template}", title_justify="left",
                  caption=f"SLOs {', '.join(report.slos)}; measured on {report.machine}")
    for c in report.candidates:
        at = c.at_chosen
        table.add_row(str(c.rank), c.id, f"{c.goodput_rps:.2f}",
                      f"{c.chosen_rate:g}" if c.chosen_rate is not None else "none met",
                      at.ttft.p95.text() if at and at.ttft else "n/a",
                      at.itl.p95.text() if at and at.itl else "n/a",
                      f"${c.cost_per_1k_usd:.4f}" if c.cost_per_1k_usd is not None else "n/a",
                      f"{c.peak_rss_mib:.0f}" if c.peak_rss_mib is not None else "n/a",
                      str(c.round_reached))
    console.print(table)
    if report.winner_command:
        console.print(f"recommended: [bold]{report.winner_id}[/]\n  {report.winner_command}")
    else:
        console.print("[yellow]no configuration met the SLOs at any probed rate[/]")
    for missed in report.confirmations_missed:
        console.print(f"[yellow]{missed.statement}[/]")
    if report.confirmation is not None:
        console.print(report.confirmation.statement)
    if report.prefix_effect is not None:
        console.print(report.prefix_effect.statement)
    for note in report.notes:
        console.print(f"[yellow]note:[/] {note}")
