"""`infertune loadtest URL --api openai-chat|openai-completions`: stream from an
OpenAI-compatible LLM server: TTFT, inter-token gaps, TPOT and output tokens per request,
goodput under ``--slo ttft_p95_ms=500,itl_p95_ms=50``, and ``--sweep`` for the highest rate
that meets those SLOs. The options arrive as one ``StreamArgs``; ``run_streaming`` runs them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from infertune.errors import ConfigError
from infertune.loadgen.llm_sweep import sweep
from infertune.loadgen.openai import (
    OpenAITarget,
    load_prompts,
    run_stream_records,
    synthetic_prompts,
)
from infertune.loadgen.runner import RunOptions
from infertune.loadgen.schedules import ScheduleSpec, build_schedule
from infertune.loadgen.stream_files import StreamRunFile, StreamSweepFile
from infertune.loadgen.streaming_result import parse_slos, per_request, summarise_streams
from infertune.loadgen.workloads import WorkloadSpec, build_prompts, parse_lengths, prefix_reuse


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

    @property
    def requested(self) -> bool:
        """Whether the call streams: a streaming --api, or --slo or --sweep (which only a
        streaming API can meet, so check() then names the --api to pass)."""
        return self.api != "json" or self.slo is not None or self.sweep

    def check(self) -> None:
        """Raise ConfigError naming the flag to change. Not done when built: every loadtest
        call builds these, and the JSON API's calls never use them."""
        if self.api not in ("openai-chat", "openai-completions"):
            need = ("--slo and --sweep need" if self.api == "json" else
                    f"--api {self.api!r} is not known;")
            raise ConfigError(f"{need} --api openai-chat or --api openai-completions (a "
                              "streaming LLM endpoint); the JSON API has no tokens")
        if self.sweep and not self.slo:
            raise ConfigError("--sweep needs --slo (e.g. ttft_p95_ms=500,itl_p95_ms=50): the "
                              "highest rate that meets what?")


def _stream_target(url: str, args: StreamArgs) -> Any:
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


def run_streaming(url: str, spec: ScheduleSpec, args: StreamArgs, options: RunOptions,
                  json_out: Path | None) -> None:
    """One open-loop run at ``spec.rate``, or (``args.sweep``) the sweep for the highest rate
    meeting the SLOs; printed, and written to ``json_out`` when given."""

    args.check()
    slos = parse_slos(args.slo) if args.slo else []
    target = _stream_target(url, args)
    last: list[Any] = []  # the latest run's per-request records

    def run_at(rate: float) -> Any:
        result, last[:] = _run_stream(build_schedule(replace(spec, rate=rate)), target,
                                      options, slos)
        return result

    payload = _sweep(run_at, spec, args) if args.sweep else _once(run_at, spec, target, last)
    if json_out is not None:
        payload.save(json_out)


def _once(run_at: Any, spec: ScheduleSpec, target: Any, last: list[Any]) -> StreamRunFile:
    result = run_at(spec.rate)
    reuse = prefix_reuse(target.prompts, len(last))
    _print_stream(result)
    typer.echo(f"prefix reuse sent: {reuse.share:.0%} of the prompt characters had been "
               f"sent before in this run ({reuse.requests_reusing} of {reuse.requests} "
               "requests reused at least 64)" + _cached(last))
    return StreamRunFile(spec, result, [per_request(r) for r in last], reuse)


def _sweep(run_at: Any, spec: ScheduleSpec, args: StreamArgs) -> StreamSweepFile:
    found = sweep(run_at, spec.rate, max_steps=args.sweep_steps)
    _print_sweep(found)
    return StreamSweepFile(spec, found)


def _cached(records: list[Any]) -> str:
    """The server's own count of prompt tokens served from its prefix cache, if it sent one."""
    pairs = [(r.cached_tokens, r.prompt_tokens) for r in records if r.ok]
    if not pairs or any(c is None or not p for c, p in pairs):
        return ""
    share = sum(c for c, _ in pairs) / sum(p for _, p in pairs)
    return f"; the server took {share:.0%} of prompt tokens from its cache"


def _run_stream(schedule: Any, target: Any, options: Any, slos: Any) -> tuple[Any, list[Any]]:
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
    console = Console()
    load, counts = result.load, result.output_tokens
    console.print(f"[bold]{load.target}[/] ({result.api}): {load.sent} requests, scheduled "
                  f"{load.target_rate:.2f} req/s, achieved {load.achieved_rate:.2f} req/s, "
                  f"completed {result.requests_per_s:.2f} req/s, output "
                  f"{result.output_tokens_per_s:.1f} tokens/s"
                  + (f" (token counts: {counts.source})" if counts else ""))
    console.print(_stream_table(result))
    if counts:
        console.print(f"output tokens per request: mean {counts.mean:.1f}, min {counts.min}, "
                      f"max {counts.max} ({counts.source})")
    if result.prompt_tokens:
        p = result.prompt_tokens
        console.print(f"prompt tokens per request: mean {p.mean:.1f}, min {p.min}, max {p.max} "
                      "(usage)")
    _print_slos(console, result)
    statuses = ", ".join(f"{k}: {v}" for k, v in sorted(load.status_counts.items()))
    lag = load.client_lag_ms
    console.print(f"statuses {statuses}; client lag p50 {lag['p50']:.3f} ms, p99 "
                  f"{lag['p99']:.3f} ms, max {lag['max']:.3f} ms")
    for warning in [*load.warnings, *result.warnings]:
        console.print(f"[yellow]warning:[/] {warning}")


def _stream_table(result: Any) -> Any:
    table = Table("ms [95% CI]", "p50", "p95", "p99", "n",
                  caption="TTFT: time to first token; ITL: each inter-token gap; TPOT: time "
                          "per output token; TTFT and e2e from the intended send time")
    rows = (("TTFT", result.ttft), ("ITL", result.itl), ("TPOT", result.tpot),
            ("e2e", result.load.latency))
    for label, summary in rows:
        if summary is None:
            table.add_row(label, "n/a", "n/a", "n/a", "0")
            continue
        p = summary.percentiles
        table.add_row(label, _ci(p["p50"]), _ci(p["p95"]), _ci(p["p99"]), str(summary.count))
    return table


def _print_slos(console: Any, result: Any) -> None:
    """Each SLO's verdict, then goodput (what it counts)."""
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


def _print_sweep(found: Any) -> None:
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
