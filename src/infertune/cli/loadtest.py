"""`infertune loadtest TARGET`: send a seeded arrival schedule to an HTTP endpoint or to a model
run in-process behind a dynamic batcher, open-loop, and summarise the latency measured from each
request's intended send time. ``--schedule-only`` prints the schedule's statistics and sends
nothing.

``--api openai-chat|openai-completions`` streams from an OpenAI-compatible LLM server instead
(the JSON API stays the default): TTFT, inter-token gaps, TPOT and output tokens per request,
goodput under ``--slo ttft_p95_ms=500,itl_p95_ms=50``, and ``--sweep`` for the highest rate that
meets those SLOs (cli/loadtest_stream.py).

The command only groups its flags into ``LoadtestArgs`` and hands them to ``run_loadtest``.
The JSON API's run builds ``api.LoadtestOptions`` and sends through ``api.load_target``, the
target ``api.loadtest`` sends to; this module adds the progress bar and the printed summary."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from infertune.cli.api import LoadtestOptions, load_target
from infertune.cli.loadtest_stream import StreamArgs, run_streaming
from infertune.config import ServePolicy
from infertune.errors import ConfigError
from infertune.jsonfile import write_json
from infertune.loadgen.result import LoadResult
from infertune.loadgen.runner import RunOptions, run_load
from infertune.loadgen.schedules import (
    Schedule,
    ScheduleSpec,
    ScheduleStats,
    build_schedule,
    parse_duration,
)
from infertune.loadgen.targets import Target

STRIP_CHARS = " ▁▂▃▄▅▆▇█"

TargetRef = Annotated[str | None, typer.Argument(
    help="http(s) URL, or a model reference (run in-process behind a batcher), e.g. minilm")]
Shape = Annotated[str, typer.Option(help="constant|poisson|gamma|onoff|ramp|trace")]
Rate = Annotated[float, typer.Option(help="mean requests/s (onoff: base rate; ramp: start)")]
Duration = Annotated[str | None, typer.Option(
    help="how long, e.g. 60s, 2m [default: 30s; a trace's own length for --shape trace]")]
Burstiness = Annotated[float, typer.Option(help="gamma shape b: 1 Poisson, < 1 burstier")]
PeakRate = Annotated[float | None, typer.Option(help="onoff peak rate; ramp end rate")]
BurstS = Annotated[float, typer.Option(help="onoff mean burst length, seconds")]
GapS = Annotated[float, typer.Option(help="onoff mean gap length, seconds")]
Trace = Annotated[Path | None, typer.Option(help="CSV or JSONL of timestamps or gaps")]
TraceScale = Annotated[float, typer.Option(help="speed a trace up (2 = twice the rate)")]
BodyFile = Annotated[Path | None, typer.Option(
    help="JSONL: HTTP POST bodies, or raw model inputs in-process; used round-robin")]
MaxInFlight = Annotated[int | None, typer.Option(
    help="cap on concurrent requests; requests over it wait client-side (counted as client "
         "lag)")]
TimeoutS = Annotated[float, typer.Option(help="HTTP request timeout, seconds")]
SpinMs = Annotated[float, typer.Option(
    help="most the client busy-waits before each send instead of sleeping (0: never; inf: "
         "never sleeps, for a client on a core of its own, e.g. on a VM, where a sleeping core "
         "wakes late)")]
MaxBatchSize = Annotated[int, typer.Option(help="in-process batcher: largest batch")]
MaxWaitMs = Annotated[float, typer.Option(
    help="in-process batcher: longest wait of the first queued request")]
Workers = Annotated[int, typer.Option(help="in-process batcher: model workers")]
MaxQueue = Annotated[int, typer.Option(help="in-process batcher: queue bound (503 beyond)")]
JsonOut = Annotated[Path | None, typer.Option("--json", help="write the result as JSON here")]
ScheduleOnly = Annotated[bool, typer.Option(
    help="print the schedule's statistics and send nothing")]
Seed = Annotated[int, typer.Option(help="seed of the schedule (and the bootstrap CIs)")]
Api = Annotated[str, typer.Option(
    help="json (POST/GET, the default) | openai-chat | openai-completions (streamed, "
         "token-level figures)")]
Slo = Annotated[str | None, typer.Option(
    help="token-level SLOs for goodput, e.g. ttft_p95_ms=500,itl_p95_ms=50")]
Prompts = Annotated[Path | None, typer.Option(
    help='JSONL of {"messages": [...]} or {"prompt": ...} (optional max_tokens); default: '
         "synthetic prompts")]
PromptTokens = Annotated[int, typer.Option(
    help="synthetic prompt length in words (about as many tokens)")]
OutputTokens = Annotated[int, typer.Option(
    help="max_tokens of each request (synthetic, or --prompts lines without one)")]
ModelName = Annotated[str | None, typer.Option(
    help="the request's model field (default: the first id at /v1/models)")]
Tokenizer = Annotated[Path | None, typer.Option(
    help="local tokenizer folder to count output tokens when the server sends no usage")]
Sweep = Annotated[bool, typer.Option(
    help="find the highest rate meeting --slo (open-loop runs from --rate)")]
SweepSteps = Annotated[int, typer.Option(help="most runs in a sweep")]
PrefixTokens = Annotated[int, typer.Option(
    help="synthetic prompts: words of a shared system prompt")]
PrefixShare = Annotated[float, typer.Option(
    help="share of the prompts (0..1) that start with the shared prefix")]
Turns = Annotated[int, typer.Option(
    help="synthetic multi-turn sessions: each turn resends the history")]
PromptLengths = Annotated[str | None, typer.Option(
    help="synthetic user-turn lengths: N, uniform:LOW,HIGH or lognormal:MEDIAN,SIGMA")]


def loadtest(target: TargetRef = None, shape: Shape = "poisson", rate: Rate = 10.0,
             duration: Duration = None, burstiness: Burstiness = 1.0,
             peak_rate: PeakRate = None, burst_s: BurstS = 2.0, gap_s: GapS = 8.0,
             trace: Trace = None, trace_scale: TraceScale = 1.0, body_file: BodyFile = None,
             max_in_flight: MaxInFlight = None, timeout_s: TimeoutS = 30.0,
             spin_ms: SpinMs = 1.0, max_batch_size: MaxBatchSize = 8,
             max_wait_ms: MaxWaitMs = 2.0, workers: Workers = 1, max_queue: MaxQueue = 256,
             json_out: JsonOut = None, schedule_only: ScheduleOnly = False, seed: Seed = 0,
             api: Api = "json", slo: Slo = None, prompts: Prompts = None,
             prompt_tokens: PromptTokens = 128, output_tokens: OutputTokens = 64,
             model_name: ModelName = None, tokenizer: Tokenizer = None, sweep: Sweep = False,
             sweep_steps: SweepSteps = 8, prefix_tokens: PrefixTokens = 0,
             prefix_share: PrefixShare = 0.0, turns: Turns = 1,
             prompt_lengths: PromptLengths = None) -> None:
    """Open-loop load test at a production traffic shape (latency from intended send)."""

    run_loadtest(LoadtestArgs(
        target=target,
        schedule=_spec(shape, rate, duration, seed, burstiness=burstiness, peak_rate=peak_rate,
                       burst_s=burst_s, gap_s=gap_s, trace=trace, trace_scale=trace_scale),
        bodies=body_file, max_in_flight=max_in_flight, timeout_s=timeout_s, spin_ms=spin_ms,
        batcher=BatcherKnobs(max_batch_size, max_wait_ms, workers, max_queue),
        stream=StreamArgs(api, slo, prompts, prompt_tokens, output_tokens, model_name,
                          tokenizer, timeout_s, sweep, sweep_steps, prefix_tokens,
                          prefix_share, turns, prompt_lengths),
        schedule_only=schedule_only, json_out=json_out))


@dataclass(frozen=True)
class BatcherKnobs:
    """The in-process batcher's flags, made a ServePolicy only when a model is run in-process
    (a URL's server has its own batcher, so bad knobs there are never an error)."""

    max_batch_size: int
    max_wait_ms: float
    workers: int
    max_queue: int

    def policy(self) -> ServePolicy:
        """The knobs as a ServePolicy; a bad one names its flag."""
        try:
            return ServePolicy(max_batch_size=self.max_batch_size, max_wait_ms=self.max_wait_ms,
                               workers=self.workers, max_queue=self.max_queue)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise ConfigError(f"--{str(err['loc'][0]).replace('_', '-')} = {err['input']!r}: "
                              f"{err['msg']}") from exc


@dataclass(frozen=True)
class LoadtestArgs:
    """One ``infertune loadtest`` call's flags, grouped by what uses them. Only the schedule
    is checked when this is built; run_loadtest checks the rest as it reaches them, so
    ``--schedule-only`` never fails on a flag it does not use."""

    target: str | None
    schedule: ScheduleSpec
    bodies: Path | None
    max_in_flight: int | None
    timeout_s: float
    spin_ms: float
    batcher: BatcherKnobs
    stream: StreamArgs
    schedule_only: bool
    json_out: Path | None


def run_loadtest(args: LoadtestArgs) -> None:
    """Print the schedule's statistics (``schedule_only``), or send it: streamed to an LLM
    server (cli/loadtest_stream.py) or to the JSON API's target (``run``)."""

    schedule = build_schedule(args.schedule)
    sending = RunOptions(max_in_flight=args.max_in_flight, seed=args.schedule.seed,
                         spin_s=args.spin_ms / 1000)
    if args.schedule_only:
        _print_schedule(args.schedule, schedule.stats(), args.json_out)
        return
    if not args.target:
        raise ConfigError("loadtest needs a TARGET: an http(s) URL or a model reference "
                          "(or pass --schedule-only)")
    if args.stream.requested:
        run_streaming(args.target, args.schedule, args.stream, sending, args.json_out)
        return
    policy = None if _is_url(args.target) else args.batcher.policy()
    options = LoadtestOptions(args.target, args.schedule, args.bodies, policy,
                              args.max_in_flight, args.timeout_s, args.spin_ms)
    run(schedule, options, sending, args.json_out)


def register(app: typer.Typer) -> None:
    app.command("loadtest")(loadtest)


def _spec(shape: str, rate: float, duration: str | None, seed: int,
          **shape_args: Any) -> ScheduleSpec:
    default_s = None if shape == "trace" else 30.0  # a trace lasts as long as it is
    seconds = parse_duration(duration, "--duration") if duration else default_s
    return ScheduleSpec(shape=shape, rate=rate, duration_s=seconds, seed=seed, **shape_args)


def _is_url(ref: str) -> bool:
    return ref.startswith(("http://", "https://"))


def run(schedule: Schedule, options: LoadtestOptions, sending: RunOptions,
        json_out: Path | None) -> None:
    """Send ``schedule`` to the target (api.load_target) with a progress bar on stderr, print
    the summary and write it to ``json_out`` when given."""
    result = _run(schedule, load_target(options), sending)
    _print_result(result)
    if json_out is not None:
        write_json(json_out, {"schema": "infertune.loadtest/v1",
                              "spec": options.schedule.to_dict(), "result": result.to_dict()})


def _run(schedule: Schedule, target: Target, options: RunOptions) -> LoadResult:
    columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(f"loadtest {target.name}", total=len(schedule))
        return run_load(schedule, target, options,
                        on_progress=lambda done, total: progress.update(task, completed=done))


def _print_schedule(spec: ScheduleSpec, stats: ScheduleStats, json_out: Path | None) -> None:
    typer.echo(f"schedule {spec.shape}: {stats.count} requests over {stats.duration_s:g} s")
    typer.echo(f"  mean rate       {stats.mean_rate:.2f} req/s")
    typer.echo(f"  peak 1-s rate   {stats.peak_1s_rate:.0f} req/s")
    typer.echo(f"  gap squared CV  {stats.gap_scv:.3f}  (1 = Poisson; > 1 bursty)")
    if json_out is not None:
        write_json(json_out, {"schema": "infertune.schedule/v1", "spec": spec.to_dict(),
                              "stats": stats.to_dict()})


def _print_result(result: LoadResult) -> None:
    console = Console()
    s = result.schedule
    console.print(f"[bold]{result.target}[/]: {result.sent} requests, scheduled "
                  f"{result.target_rate:.1f} req/s, achieved {result.achieved_rate:.1f} req/s, "
                  f"goodput {result.goodput_rps:.1f} req/s (gap squared CV {s.gap_scv:.2f}, "
                  f"peak 1-s rate {s.peak_1s_rate:.0f})")
    if result.latency is not None:
        table = Table("latency (ms, from intended send)", "value", "95% CI")
        for key, label in (("p50", "p50"), ("p95", "p95"), ("p99", "p99"), ("p99_9", "p99.9")):
            est = result.latency.percentiles[key]
            ci = f"{est.low:.2f} – {est.high:.2f}" if est.low is not None else "n/a"
            table.add_row(label, f"{est.value:.2f}", ci)
        console.print(table)
        console.print(result.latency.tail_note)
    else:
        console.print("no request succeeded, so there is no latency to report")
    statuses = ", ".join(f"{k}: {v}" for k, v in sorted(result.status_counts.items()))
    console.print(f"statuses {statuses}; sheds {result.sheds}, errors {result.errors}")
    lag = result.client_lag_ms
    console.print(f"client lag p50 {lag['p50']:.3f} ms, p99 {lag['p99']:.3f} ms, max "
                  f"{lag['max']:.3f} ms; waited for an in-flight slot: {result.waited_for_slot}")
    if result.utilisation is not None:
        console.print(f"model workers busy {result.utilisation:.0%} of the run")
    if result.server_timing_ms:
        parts = ", ".join(f"{k} {v:.2f}" for k, v in result.server_timing_ms.items())
        console.print(f"server timing (mean ms): {parts}")
    if result.timeline:
        console.print(latency_strip(result.timeline))
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning}")


def latency_strip(points: list[Any]) -> str:
    """Per-second p99 as one row of block characters, scaled to the worst second."""
    values = [p.p99_ms for p in points]
    top = max((v for v in values if v is not None), default=0.0)
    chars = []
    for v in values:
        if v is None:
            chars.append("·")
        else:
            level = 0 if top <= 0 else round(v / top * (len(STRIP_CHARS) - 2)) + 1
            chars.append(STRIP_CHARS[min(level, len(STRIP_CHARS) - 1)])
    return (f"p99 per second (0 .. {len(points)} s, top {top:.1f} ms; · no successes):\n"
            f"  {''.join(chars)}")
