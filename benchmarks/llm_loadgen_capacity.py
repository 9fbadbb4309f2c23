"""How many concurrent streams and output tokens/s the streaming (OpenAI-chat) load generator
sustains on one core with client-lag p99 under 1 ms (and the achieved rate within 2% of the
target, every request answered).

The server is the shipped llmserver with ``--synthetic-itl-ms`` (no model: one token per that
many ms, so the server costs little and never computes) in a separate process pinned to another
core when there is one; this process, the client, is pinned to one core. Each line is one
measured open-loop run at a constant rate. Concurrent streams are measured, not assumed: the
mean number of requests in flight (sum of each request's send-to-last-byte time / run length).
The ITL columns show whether the server kept its pace (a server that falls behind shows there,
not in client lag); "client CPU" is this process's CPU time over the run's wall time, and
"us/token" that CPU time per output token received (CPU time, so a busy machine inflates it
less than it inflates lag).

    .venv/bin/python benchmarks/llm_loadgen_capacity.py [--seconds 5] [--rates 10 20 50 ...]
        [--itl-ms 10] [--output-tokens 64]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

from loadgen_capacity import LAG_P99_LIMIT_MS, pin  # the HTTP twin of this benchmark, beside it


def start_server(core: int | None, itl_ms: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "infertune.loadgen.llmserver", "--port", "0",
                             "--synthetic-itl-ms", str(itl_ms)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url:
        raise SystemExit("the llm server did not start")
    if core is not None:
        pin(proc.pid, core)
    return proc, url


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rates", type=float, nargs="+", default=[10, 20, 50, 100, 150, 200])
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--output-tokens", type=int, default=64)
    args = parser.parse_args()

    from infertune.loadgen.openai import OpenAITarget, run_stream_records, synthetic_prompts
    from infertune.loadgen.runner import RunOptions
    from infertune.loadgen.schedules import ScheduleSpec, build_schedule
    from infertune.loadgen.streaming_result import summarise_streams

    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    client_core, server_core = cores[0], (cores[1] if len(cores) > 1 else None)
    proc, url = start_server(server_core, args.itl_ms)
    pinned = pin(0, client_core)
    print(f"client pinned to core {client_core}: {pinned}; server on core {server_core} "
          f"({len(cores)} cores visible; load average {os.getloadavg()[0]:.1f}); "
          f"{args.output_tokens} tokens per stream, one per {args.itl_ms:g} ms")
    print(f"{'rate/s':>7} {'achieved':>8} {'ok':>5} {'streams':>8} {'tokens/s':>9} "
          f"{'lag p50':>8} {'lag p99':>8} {'ITL p50':>8} {'ITL p99':>8} {'client CPU':>10} "
          f"{'us/token':>8}  verdict")
    prompts = synthetic_prompts(8, args.output_tokens)
    best: tuple[float, float, float] | None = None
    try:
        for rate in args.rates:
            target = OpenAITarget(url + "v1/chat/completions", "openai-chat", prompts,
                                  model="bench")
            schedule = build_schedule(ScheduleSpec(shape="constant", rate=rate,
                                                   duration_s=args.seconds))
            wall0, cpu0 = time.perf_counter(), cpu_seconds()
            load, records = run_stream_records(schedule, target, RunOptions())
            wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
            result = summarise_streams("openai-chat", load, records)
            window = max(args.seconds, max((r.done_s for r in records), default=0.0))
            streams = sum(r.done_s - r.sent_s for r in records) / window
            lag = load.client_lag_ms
            within = abs(load.achieved_rate - rate) <= 0.02 * rate
            ok = lag["p99"] < LAG_P99_LIMIT_MS and within and load.ok == load.sent
            itl = result.itl
            tokens = result.output_tokens.total if result.output_tokens else 0
            per_token = cpu / tokens * 1e6 if tokens else float("nan")
            print(f"{rate:7.0f} {load.achieved_rate:8.1f} {load.ok:5d} {streams:8.1f} "
                  f"{result.output_tokens_per_s:9.0f} {lag['p50']:8.3f} {lag['p99']:8.3f} "
                  f"{itl.p50 if itl else float('nan'):8.2f} "
                  f"{itl.p99 if itl else float('nan'):8.2f} {cpu / wall:10.0%} {per_token:8.1f}  "
                  f"{'sustained' if ok else 'no'}")
            if ok:
                best = (rate, streams, result.output_tokens_per_s)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    if best is None:
        print("no tried rate kept client-lag p99 under 1 ms on this machine now")
    else:
        print(f"highest sustained: {best[0]:.0f} req/s = {best[1]:.0f} concurrent streams and "
              f"{best[2]:.0f} output tokens/s on one client core (client-lag p99 < "
              f"{LAG_P99_LIMIT_MS:g} ms, achieved within 2%, every request answered)")


if __name__ == "__main__":
    main()
