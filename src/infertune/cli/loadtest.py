"""`infertune loadtest TARGET`: send a seeded arrival schedule to an HTTP endpoint or to a model
run in-process behind a dynamic batcher, open-loop, and summarise the latency measured from each
request's intended send time. ``--schedule-only`` prints the schedule's statistics and sends
nothing.

``--api openai-chat|openai-completions`` streams from an OpenAI-compatible LLM server instead
(the JSON API stays the default): TTFT, inter-token gaps, TPOT and output tokens per request,
goodput under ``--slo ttft_p95_ms=500,itl_p95_ms=50``, and ``--sweep`` for the highest rate that
meets those SLOs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from infertune.errors import ConfigError

if TYPE_CHECKING:  # the runner (numpy, asyncio) is imported when a test runs, not for --help
    from infertune.loadgen.runner import RunOptions

STRIP_CHARS = " ▁▂▃▄▅▆▇█"


def register(app: typer.Typer) -> None:
    @app.command("loadtest")
    def loadtest(
        target: Annotated[str | None, typer.Argument(
            help="http(s) URL, or a model reference (run in-process behind a batcher), "
                 "e.g. minilm")] = None,
        shape: Annotated[str, typer.Option(
            help="constant|poisson|gamma|onoff|ramp|trace")] = "poisson",
        rate: Annotated[float, typer.Option(
            help="mean requests/s (onoff: base rate; ramp: start)")] = 10.0,
        duration: Annotated[str | None, typer.Option(
            help="how long, e.g. 60s, 2m [default: 30s; a trace's own length for "
                 "--shape trace]")] = None,
        burstiness: Annotated[float, typer.Option(
            help="gamma shape b: 1 Poisson, < 1 burstier")] = 1.0,
        peak_rate: Annotated[float | None, typer.Option(
            help="onoff peak rate; ramp end rate")] = None,
        burst_s: Annotated[float, typer.Option(help="onoff mean burst length, seconds")] = 2.0,
        gap_s: Annotated[float, typer.Option(help="onoff mean gap length, seconds")] = 8.0,
        trace: Annotated[Path | None, typer.Option(
            help="CSV or JSONL of timestamps or gaps")] = None,
        trace_scale: Annotated[float, typer.Option(
            help="speed a trace up (2 = twice the rate)")] = 1.0,
        body_file: Annotated[Path | None, typer.Option(
            help="JSONL: HTTP POST bodies, or raw model inputs in-process; used "
                 "round-robin")] = None,
        max_in_flight: Annotated[int | None, typer.Option(
            help="cap on concurrent requests; requests over it wait client-side "
                 "(counted as client lag)")] = None,
        timeout_s: Annotated[float, typer.Option(help="HTTP request timeout, seconds")] = 30.0,
        spin_ms: Annotated[float, typer.Option(
            help="most the client busy-waits before each send instead of sleeping (0: never; "
                 "inf: never sleeps, for a client on a core of its own, e.g. on a VM, where "
                 "a sleeping core wakes late)")] = 1.0,
        max_batch_size: Annotated[int, typer.Option(help="in-process batcher: largest batch")] = 8,
        max_wait_ms: Annotated[float, typer.Option(
            help="in-process batcher: longest wait of the first queued request")] = 2.0,
        workers: Annotated[int, typer.Option(help="in-process batcher: model workers")] = 1,
        max_queue: Annotated[int, typer.Option(
            help="in-process batcher: queue bound (503 beyond)")] = 256,
        json_out: Annotated[Path | None, typer.Option(
            "--json", help="write the result as JSON here")] = None,
        schedule_only: Annotated[bool, typer.Option(
            help="print the schedule's statistics and send nothing")] = False,
        seed: Annotated[int, typer.Option(help="seed of the schedule (and the bootstrap CIs)")] = 0,
        api: Annotated[str, typer.Option(
            help="json (POST/GET, the default) | openai-chat | openai-completions "
                 "(streamed, token-level figures)")] = "json",
        slo: Annotated[str | None, typer.Option(
            help="token-level SLOs for goodput, e.g. ttft_p95_ms=500,itl_p95_ms=50")] = None,
        prompts: Annotated[Path | None, typer.Option(
            help='JSONL of {"messages": [...]} or {"prompt": ...} (optional max_tokens); '
                 "default: synthetic prompts")] = None,
        prompt_tokens: Annotated[int, typer.Option(
            help="synthetic prompt length in words (about as many tokens)")] = 128,
        output_tokens: Annotated[int, typer.Option(
            help="max_tokens of each request (synthetic, or --prompts lines without one)")] = 64,
        model_name: Annotated[str | None, typer.Option(
            help="the request's model field (default: the first id at /v1/models)")] = None,
        tokenizer: Annotated[Path | None, typer.Option(
            help="local tokenizer folder to count output tokens when the server sends no "
                 "usage")] = None,
        sweep: Annotated[bool, typer.Option(
            help="find the highest rate meeting --slo (open-loop runs from --rate)")] = False,
        sweep_steps: Annotated[int, typer.Option(help="most runs in a sweep")] = 8,
        prefix_tokens: Annotated[int, typer.Option(
            help="synthetic prompts: words of a shared system prompt")] = 0,
        prefix_share: Annotated[float, typer.Option(
            help="share of the prompts (0..1) that start with the shared prefix")] = 0.0,
        turns: Annotated[int, typer.Option(
            help="synthetic multi-turn sessions: each turn resends the history")] = 1,
        prompt_lengths: Annotated[str | None, typer.Option(
            help="synthetic user-turn lengths: N, uniform:LOW,HIGH or lognormal:MEDIAN,SIGMA"
        )] = None,
    ) -> None:
        """Open-loop load test at a production traffic shape (latency from intended send)."""
        from infertune.loadgen.runner import RunOptions
        from infertune.loadgen.schedules import ScheduleSpec, build_schedule, parse_duration

        default_s = None if shape == "trace" else 30.0  # a trace lasts as long as it is
        seconds = parse_duration(duration, "--duration") if duration else default_s
        spec = ScheduleSpec(shape=shape, rate=rate, duration_s=seconds, seed=seed,
                            burstiness=burstiness, peak_rate=peak_rate, burst_s=burst_s,
                            gap_s=gap_s, trace=trace, trace_scale=trace_scale)
        schedule = build_schedule(spec)
        options = RunOptions(max_in_flight=max_in_flight, seed=seed, spin_s=spin_ms / 1000)
        if schedule_only:
            _print_schedule(spec.to_dict(), schedule.stats().to_dict(), json_out)
            return
        if not target:
            raise ConfigError("loadtest needs a TARGET: an http(s) URL or a model reference "
                              "(or pass --schedule-only)")
        if api != "json" or slo is not None or sweep:
            stream = StreamArgs(api, slo, prompts, prompt_tokens, output_tokens, model_name,
                                tokenizer, timeout_s, sweep, sweep_steps, prefix_tokens,
                                prefix_share, turns, prompt_lengths)
            _run_streaming(target, spec, stream, options, json_out)
            return
        policy_args = {"max_batch_size": max_batch_size, "max_wait_ms": max_wait_ms,
                       "workers": workers, "max_queue": max_queue}
        built = _target(target, body_file, timeout_s, policy_args)
        result = _run(schedule, built, options)
        _print_result(result)
        if json_out is not None:
            from infertune.jsonfile import write_json

            write_json(json_out, {"schema": "infertune.loadtest/v1", "spec": spec.to_dict(),
                                  "result": result.to_dict()})


def _target(ref: str, body_file: Path | None, timeout_s: float,
            policy_args: dict[str, Any]) -> Any:
    from infertune.loadgen.targets import HttpTarget, load_bodies

    bodies = load_bodies(body_file) if body_file is not None else None
    if ref.startswith(("http://", "https://")):
        return HttpTarget(ref, bodies=bodies, timeout_s=timeout_s)
    from pydantic import ValidationError

    from infertune import models
    from infertune.cli._common import quiet_libraries
    from infertune.config import ServePolicy
    from infertune.loadgen.inprocess import InProcessTarget
    from infertune.serve.model_processes import ModelSource

    try:
        policy = ServePolicy(**policy_args)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ConfigError(f"--{str(err['loc'][0]).replace('_', '-')} = {err['input']!r}: "
                          f"{err['msg']}") from exc
    quiet_libraries()
    adapter = models.load(ref)
    inputs = bodies if bodies is not None else adapter.sample_inputs(64)
    # serve's own runtime; its response cache is off because the inputs are replayed
    # round-robin, and a cache answering the repeats would hide the model's latency. An eager
    # torch model's batches run in worker processes, as `infertune serve` runs them.
    return InProcessTarget(adapter, policy.model_copy(update={"cache_size": 0}), inputs,
                           model_source=ModelSource(ref, adapter.info.version,
                                                    policy.model_threads))


def _run(schedule: Any, target: Any, options: RunOptions) -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from infertune.loadgen.runner import run_load

    columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(f"loadtest {target.name}", total=len(schedule))
        return run_load(schedule, target, options,
                        on_progress=lambda done, total: progress.update(task, completed=done))


def _print_schedule(spec: dict[str, Any], stats: dict[str, Any], json_out: Path | None) -> None:
    typer.echo(f"schedule {spec['shape']}: {stats['count']} requests over "
               f"{stats['duration_s']:g} s")
    typer.echo(f"  mean rate       {stats['mean_rate']:.2f} req/s")
    typer.echo(f"  peak 1-s rate   {stats['peak_1s_rate']:.0f} req/s")
    typer.echo(f"  gap squared CV  {stats['gap_scv']:.3f}  (1 = Poisson; > 1 bursty)")
    if json_out is not None:
        from infertune.jsonfile import write_json

        write_json(json_out, {"schema": "infertune.schedule/v1", "spec": spec, "stats": stats})


def _print_result(result: Any) -> None:
    from rich.console import Console
    from rich.table import Table

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



@dataclass(frozen=True)
class StreamArgs:
    """The streaming options of one loadtest call, checked before anything is sent."""

    api: str
    slo: str | None
    prompts: Path | None
    prompt_tokens: int
    output_tokens: int
    model_name: str | None
    tokenizer: Path | None
    timeout_s: float
    sweep: bool
    sweep_steps: int
    prefix_tokens: int = 0
    prefix_share: float = 0.0
    turns: int = 1
    prompt_lengths: str | None = None

    @property
    def workload(self) -> bool:
        """A shaped prompt mix (loadgen/workloads.py) rather than plain synthetic prompts."""
        return bool(self.prefix_tokens or self.turns > 1 or self.prompt_lengths)

    def __post_init__(self) -> None:
        if self.api not in ("openai-chat", "openai-completions"):
            need = ("--slo and --sweep need" if self.api == "json" else
                    f"--api {self.api!r} is not known;")
            raise ConfigError(f"{need} --api openai-chat or --api openai-completions (a "
                              "streaming LLM endpoint); the JSON API has no tokens")
        if self.sweep and not self.slo:
            raise ConfigError("--sweep needs --slo (e.g. ttft_p95_ms=500,itl_p95_ms=50): the "
                              "highest rate that meets what?")


def _stream_target(url: str, args: StreamArgs) -> Any:
    from infertune.loadgen.openai import OpenAITarget, load_prompts, synthetic_prompts

    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"--api {args.api} streams from an http(s) URL, got {url!r}; write "
                          "it like http://127.0.0.1:8000/v1/chat/completions")
    if args.prompts is not None and args.workload:
        raise ConfigError("--prefix-tokens, --turns and --prompt-lengths shape synthetic "
                          "prompts; drop them with --prompts FILE")
    prompts = (load_prompts(args.prompts, args.output_tokens) if args.prompts is not None
               else _workload(args) if args.workload
               else synthetic_prompts(args.prompt_tokens, args.output_tokens))
    counter = _token_counter(args.tokenizer) if args.tokenizer is not None else None
    return OpenAITarget(url, args.api, prompts,  # type: ignore[arg-type]
                        model=args.model_name, timeout_s=args.timeout_s, count_tokens=counter)


def _workload(args: StreamArgs) -> Any:
    from infertune.loadgen.workloads import WorkloadSpec, build_prompts, parse_lengths

    lengths = parse_lengths(args.prompt_lengths) if args.prompt_lengths else None
    return build_prompts(WorkloadSpec(
        prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens,
        count=max(64, args.turns * 16), prefix_tokens=args.prefix_tokens,
        prefix_share=args.prefix_share, turns=args.turns, lengths=lengths))


def _token_counter(folder: Path) -> Any:
    if not folder.is_dir():
        raise ConfigError(f"--tokenizer {folder} is not a folder; pass a local tokenizer "
                          "folder (tokenizer.json or vocab files)")
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--tokenizer {folder}: no tokenizer could be read there "
                          f"({type(exc).__name__}); pass a folder saved by "
                          "save_pretrained") from exc
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])


def _run_streaming(url: str, spec: Any, args: StreamArgs, options: RunOptions,
                   json_out: Path | None) -> None:
    from dataclasses import replace

    from infertune.loadgen.llm_sweep import sweep
    from infertune.loadgen.schedules import build_schedule
    from infertune.loadgen.streaming_result import parse_slos, per_request

    slos = parse_slos(args.slo) if args.slo else []
    target = _stream_target(url, args)
    last: list[Any] = []  # the latest run's per-request records

    def run_at(rate: float) -> Any:
        result, last[:] = _run_stream(build_schedule(replace(spec, rate=rate)), target,
                                      options, slos)
        return result

    if not args.sweep:
        from infertune.loadgen.workloads import prefix_reuse

        result = run_at(spec.rate)
        reuse = prefix_reuse(target.prompts, len(last))
        _print_stream(result)
        typer.echo(f"prefix reuse sent: {reuse.share:.0%} of the prompt characters had been "
                   f"sent before in this run ({reuse.requests_reusing} of {reuse.requests} "
                   "requests reused at least 64)" + _cached(last))
        payload = {"schema": "infertune.loadtest-stream/v1", "spec": spec.to_dict(),
                   "result": result.to_dict(), "requests": [per_request(r) for r in last],
                   "prefix_reuse": reuse.model_dump()}
    else:
        found = sweep(run_at, spec.rate, max_steps=args.sweep_steps)
        _print_sweep(found)
        payload = {"schema": "infertune.loadtest-sweep/v1", "spec": spec.to_dict(),
                   "sweep": found.to_dict()}
    if json_out is not None:
        from infertune.jsonfile import write_json

        write_json(json_out, payload)


def _cached(records: list[Any]) -> str:
    """The server's own count of prompt tokens served from its prefix cache, if it sent one."""
    pairs = [(r.cached_tokens, r.prompt_tokens) for r in records if r.ok]
    if not pairs or any(c is None or not p for c, p in pairs):
        return ""
    share = sum(c for c, _ in pairs) / sum(p for _, p in pairs)
    return f"; the server took {share:.0%} of prompt tokens from its cache"


def _run_stream(schedule: Any, target: Any, options: Any, slos: Any) -> tuple[Any, list[Any]]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from infertune.loadgen.openai import run_stream_records
    from infertune.loadgen.streaming_result import summarise_streams

    columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(f"{target.api} {schedule.target_rate:.2f} req/s",
                                 total=len(schedule))
        load, records = run_stream_records(
            schedule, target, options,
            on_progress=lambda done, total: progress.update(task, completed=done))
    return summarise_streams(target.api, load, records, slos, seed=options.seed), records


def _ci(est: Any) -> str:
    ci = f" [{est.low:.1f}–{est.high:.1f}]" if est.low is not None else ""
    return f"{est.value:.1f}{ci}"


def _print_stream(result: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    load, counts = result.load, result.output_tokens
    console.print(f"[bold]{load.target}[/] ({result.api}): {load.sent} requests, scheduled "
                  f"{load.target_rate:.2f} req/s, achieved {load.achieved_rate:.2f} req/s, "
                  f"completed {result.requests_per_s:.2f} req/s, output "
                  f"{result.output_tokens_per_s:.1f} tokens/s"
                  + (f" (token counts: {counts.source})" if counts else ""))
    table = Table("ms [95% CI]", "p50", "p95", "p99", "n",
                  caption="TTFT: time to first token; ITL: each inter-token gap; TPOT: time "
                          "per output token; TTFT and e2e from the intended send time")
    rows = (("TTFT", result.ttft), ("ITL", result.itl), ("TPOT", result.tpot),
            ("e2e", load.latency))
    for label, summary in rows:
        if summary is None:
            table.add_row(label, "n/a", "n/a", "n/a", "0")
            continue
        p = summary.percentiles
        table.add_row(label, _ci(p["p50"]), _ci(p["p95"]), _ci(p["p99"]), str(summary.count))
    console.print(table)
    if counts:
        console.print(f"output tokens per request: mean {counts.mean:.1f}, min {counts.min}, "
                      f"max {counts.max} ({counts.source})")
    if result.prompt_tokens:
        p = result.prompt_tokens
        console.print(f"prompt tokens per request: mean {p.mean:.1f}, min {p.min}, max {p.max} "
                      "(usage)")
    for v in result.slos:
        shown = f"{v.measured_ms:.1f}" if v.measured_ms is not None else "not measured"
        console.print(f"SLO {v.slo.key} <= {v.slo.limit_ms:g}: {shown} — "
                      f"{'met' if v.met else '[red]missed[/]'}")
    if result.slos:
        console.print(f"goodput {result.goodput_rps:.2f} req/s "
                      f"({result.goodput_share:.0%} of requests met every SLO on their own)")
    else:
        console.print(f"goodput {result.goodput_rps:.2f} req/s ({result.goodput_share:.0%} of "
                      "requests completed; no --slo given, so every completed request counts: "
                      "pass e.g. --slo ttft_p95_ms=500,itl_p95_ms=50)")
    statuses = ", ".join(f"{k}: {v}" for k, v in sorted(load.status_counts.items()))
    lag = load.client_lag_ms
    console.print(f"statuses {statuses}; client lag p50 {lag['p50']:.3f} ms, p99 "
                  f"{lag['p99']:.3f} ms, max {lag['max']:.3f} ms")
    for warning in [*load.warnings, *result.warnings]:
        console.print(f"[yellow]warning:[/] {warning}")


def _print_sweep(found: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table("rate", "scheduled", "achieved", "TTFT p95", "ITL p95", "goodput", "verdict",
                  caption="req/s and ms; 'scheduled' is the drawn schedule's own mean rate")
    for probe in found.probes:
        r = probe.result
        ttft = f"{r.ttft.p95:.1f}" if r.ttft is not None else "n/a"
        itl = f"{r.itl.p95:.1f}" if r.itl is not None else "n/a"
        table.add_row(f"{probe.rate:.2f}", f"{r.load.target_rate:.2f}",
                      f"{r.load.achieved_rate:.2f}", ttft, itl,
                      f"{r.goodput_rps:.2f}", ("pass: " if probe.passed else "fail: ")
                      + probe.why)
    console.print(table)
    best = (f"{found.best_rate:.2f} req/s" if found.best_rate is not None
            else "none of the probed rates")
    console.print(f"highest rate meeting the SLOs: {best} (sweep stopped: {found.stopped})")
    for note in found.notes:
        console.print(f"[yellow]note:[/] {note}")
