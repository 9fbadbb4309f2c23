"""How many concurrent streams and output tokens/s the streaming (OpenAI-chat) load generator
sustains on one core with client-lag p99 under 1 ms (and the achieved rate within 2% of the
target, every request answered, the server on pace).

The server is infertune.loadgen.fake_llmserver, a load source for this benchmark and nothing else:
no model, one fixed token per ``--itl-ms`` on a timer (a timer callback and a socket write per
token), in a separate process pinned to another core when there is one. This process, the client,
is pinned to one core. Each line is one measured open-loop run at a constant rate, rates rising:

    streams     mean requests in flight (sum of each request's send-to-last-byte time / run
                length): measured, not assumed
    tokens/s    output tokens received per second
    lag         client lag, actual minus intended send time (ms)
    srv gap p99 the server's own inter-token gap p99 (from its infertune_timing): when it is
                well above --itl-ms the server fell behind, and that line says so instead of
                judging the client
    client CPU  this process's CPU time over the run's wall time (it includes the runner's
                spinning before each send, so it is not all per-token work), and per token
    wake p99    measured just before the run, with nothing else in this process: how late a
                bare timer sleep of 0.2-3 ms wakes up on the client core (p99 over 300
                sleeps). It is the machine's floor, not the client's doing: a shared or busy
                machine puts it near or above 1 ms, and then no client can keep lag under it
    off-CPU     share of the run the client was runnable but not running: queued behind other
                tasks on its core, or its virtual CPU held by the host (steal). Measured during
                the run; a send due then goes out late whatever the client does

Before the capacity lines, a side-by-side of the client's CPU per token: the stream reader it
uses (http_stream: stamp and keep the bytes, parse after the run) against aiohttp's stream
reader parsing each event as it arrives (how this client read streams before), at one rate,
runs interleaved A B B A, no spinning before sends (so the CPU is the reading), CPU time of the
run only. CPU time, not wall time, so a busy machine disturbs it less than it disturbs lag.

    .venv/bin/python benchmarks/llm_loadgen_capacity.py [--seconds 4] [--rates 50 100 ...]
        [--itl-ms 10] [--output-tokens 64] [--ab-rate 100] [--ab-seconds 3] [--lockstep]
        [--spin-ms inf] [--server-sleeps]

Both sides own a core and never sleep: the client spins before every send (``--spin-ms inf``,
as ``infertune loadtest --spin-ms inf`` does) and the server polls (fake_llmserver ``--spin``).
On a virtual machine a core that went idle wakes late (the wake p99 column: 0.5-9 ms on a 2-core
AMD EPYC VM in session 4), so a client that sleeps until shortly before each send is late by
the VM's wake-up, not by its own work; ``--spin-ms 1`` (loadtest's default) shows that.

``--lockstep`` makes the server send every stream's token at the same step, as a continuous-
batching engine does: the client then reads in bursts, its hardest case.

The verdict line names the rate with the most concurrent streams among those sustained. On a
machine shared with other work the lag tail is the first thing to suffer: the load average is
printed on every line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass

import aiohttp
import numpy as np
from loadgen_capacity import (  # the HTTP twin of this benchmark, beside it
    LAG_P99_LIMIT_MS,
    cpu_model,
    pin,
    wake_p99_ms,
)

from infertune.loadgen.http_stream import RawResponse
from infertune.loadgen.openai import OpenAITarget, synthetic_prompts
from infertune.loadgen.precise_loop import precise_runner
from infertune.loadgen.result import LoadResult, summarise
from infertune.loadgen.runner import RunOptions, run_schedule
from infertune.loadgen.schedules import Schedule, ScheduleSpec, build_schedule
from infertune.loadgen.streaming_result import StreamRecord, summarise_streams
from infertune.loadgen.targets import Reply
from infertune.measure.collector import steady_gc

SERVER_SLACK = 1.5  # the server is "on pace" while its gap p99 stays under 1.5 x --itl-ms
# a failed line names the client's off-core share when it is at least this: sends due while
# the client was off its core went out late whatever the client did (a cause, not a proof)
OFF_CPU_NOTE = 0.01
SATURATED_LAG_MS = 10.0  # a median lag this high: the client is past its capacity, stop


@dataclass
class Line:
    rate: float
    streams: float
    tokens_per_s: float
    lag_p50_ms: float
    lag_p99_ms: float
    wake_p99_ms: float
    off_cpu: float  # share of the run's wall time the client was runnable but not running
    verdict: str


class AiohttpReaderTarget(OpenAITarget):
    """The reader compared against: aiohttp's stream reader, each event's JSON parsed as it
    arrives (the client's previous way). It keeps the same raw bytes, so ``finish`` works."""

    async def open(self) -> None:
        await super().open()
        self._json = [json.dumps(self._body(p)).encode() for p in self.prompts]
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def send(self, index: int) -> Reply:
        response = self._responses[index] = RawResponse(started=self.clock())
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        async with self._session.post(self.url, data=self._json[index % len(self._json)],
                                      headers=headers) as resp:
            pending = b""
            async for chunk in resp.content.iter_any():
                now = self.clock()
                response.add(now, chunk)
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    if line.startswith(b"data: {"):
                        event = json.loads(line[6:])
                        if event.get("choices"):
                            _ = event["choices"][0].get("delta", {}).get("content")
        response.status, response.complete = str(resp.status), True
        return Reply(response.status)

    async def close(self) -> None:
        await self._session.close()
        await super().close()


def measured_run(target: OpenAITarget, schedule: Schedule, options: RunOptions
                 ) -> tuple[LoadResult, list[StreamRecord], float, float]:
    """One run as run_stream_records does it, with this process's CPU and wall time of the
    run alone (the parsing after the run is not counted)."""
    with steady_gc(), precise_runner() as loop:
        wall0, cpu0 = time.perf_counter(), cpu_seconds()
        records = loop.run(run_schedule(schedule, target, options, clock=target.clock))
        wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
    records, streams = target.finish(records)
    load = summarise(target.name, records, schedule.stats())
    return load, streams, cpu, wall


def reader_ab(url: str, args: argparse.Namespace) -> None:
    """Client CPU per token of the two readers, interleaved A B B A."""
    schedule = build_schedule(ScheduleSpec(shape="constant", rate=args.ab_rate,
                                           duration_s=args.ab_seconds))
    per_token: dict[str, list[float]] = {"http_stream": [], "aiohttp": []}
    for name in ("http_stream", "aiohttp", "aiohttp", "http_stream"):
        kind = OpenAITarget if name == "http_stream" else AiohttpReaderTarget
        target = kind(url + "v1/chat/completions", "openai-chat",
                      synthetic_prompts(8, args.output_tokens), model="bench")
        _, streams, cpu, _ = measured_run(target, schedule, RunOptions(spin_s=0.0))
        tokens = sum(len(r.token_s) for r in streams if r.ok)
        per_token[name].append(cpu / tokens * 1e6 if tokens else float("nan"))
    raw, old = (float(np.median(per_token[k])) for k in ("http_stream", "aiohttp"))
    print(f"client CPU per token at {args.ab_rate:g} req/s ({args.ab_seconds:g} s runs, A B B A, "
          f"no spinning): http_stream reader {raw:.1f} us, aiohttp reader parsing as it reads "
          f"{old:.1f} us; ratio {old / raw:.2f}x (runs: "
          f"{', '.join(f'{k} {v:.1f}' for k, vs in per_token.items() for v in vs)})")


def start_server(core: int | None, itl_ms: float, lockstep: bool,
                 spin: bool) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-m", "infertune.loadgen.fake_llmserver",
                             "--port", "0", "--itl-ms", str(itl_ms),
                             *(["--lockstep"] if lockstep else []),
                             *(["--spin"] if spin else [])],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if core is not None:
        pin(proc.pid, core)
    return proc


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def off_cpu_seconds(core: int) -> float:
    """Seconds this process was runnable but not running: waiting behind other tasks on its
    core (/proc/self/schedstat) plus the host holding the core's virtual CPU (steal, from
    /proc/stat, in 10 ms ticks). NaN where Linux does not say. A send due meanwhile goes out
    late whatever the client does."""
    try:
        wait_ns = int(open("/proc/self/schedstat").read().split()[1])
        with open("/proc/stat") as stat:
            fields = next(line for line in stat if line.startswith(f"cpu{core} ")).split()
        return wait_ns / 1e9 + int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, IndexError, ValueError):
        return float("nan")


def run_one(url: str, rate: float, args: argparse.Namespace) -> Line:
    wake = wake_p99_ms()
    prompts = synthetic_prompts(8, args.output_tokens)
    target = OpenAITarget(url + "v1/chat/completions", "openai-chat", prompts, model="bench")
    schedule = build_schedule(ScheduleSpec(shape="constant", rate=rate, duration_s=args.seconds))
    off0 = off_cpu_seconds(args.client_core)
    load, records, cpu, wall = measured_run(target, schedule,
                                            RunOptions(spin_s=args.spin_ms / 1000))
    off_cpu = (off_cpu_seconds(args.client_core) - off0) / wall
    result = summarise_streams("openai-chat", load, records)
    window = max(args.seconds, max((r.done_s for r in records), default=0.0))
    streams = sum(r.done_s - r.sent_s for r in records) / window
    lag = load.client_lag_ms
    tokens = result.output_tokens.total if result.output_tokens else 0
    server_gaps = [g for r in records for g in r.server_gaps_ms]
    server_p99 = float(np.percentile(server_gaps, 99)) if server_gaps else float("nan")
    within = abs(load.achieved_rate - rate) <= 0.02 * rate
    if not server_p99 <= SERVER_SLACK * args.itl_ms:
        verdict = "server behind: no verdict on the client"
    elif lag["p99"] < LAG_P99_LIMIT_MS and within and load.ok == load.sent:
        verdict = "sustained"
    elif off_cpu >= OFF_CPU_NOTE:
        verdict = f"no (the client was off its core {off_cpu:.1%} of the run)"
    else:
        verdict = "no"
    itl = result.itl
    print(f"{rate:7.0f} {load.achieved_rate:8.1f} {load.ok:6d} {streams:8.1f} "
          f"{result.output_tokens_per_s:9.0f} {lag['p50']:8.3f} {lag['p99']:8.3f} "
          f"{lag['max']:8.3f} {itl.p99 if itl else float('nan'):8.2f} {server_p99:8.2f} "
          f"{cpu / wall:7.0%} {cpu / tokens * 1e6 if tokens else float('nan'):8.1f} "
          f"{wake:8.3f} {off_cpu:8.2%} {os.getloadavg()[0]:5.1f}  {verdict}", flush=True)
    return Line(rate, streams, result.output_tokens_per_s, lag["p50"], lag["p99"], wake, off_cpu,
                verdict)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rates", type=float, nargs="+",
                        default=[25, 50, 100, 200, 300, 400, 600, 800])
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--spin-ms", type=float, default=float("inf"),
                        help="the most the runner spins before a send (RunOptions.spin_s; "
                             "default inf: it never sleeps, see the docstring)")
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--ab-rate", type=float, default=100.0, help="0: skip the reader A/B")
    parser.add_argument("--ab-seconds", type=float, default=3.0)
    parser.add_argument("--lockstep", action="store_true",
                        help="the server steps every stream together (continuous batching): "
                             "tokens arrive in bursts")
    parser.add_argument("--server-sleeps", action="store_true",
                        help="let the server sleep between tokens instead of polling on its "
                             "own core (fake_llmserver --spin, the default when there are two "
                             "cores)")
    args = parser.parse_args()

    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    client_core, server_core = cores[0], (cores[1] if len(cores) > 1 else None)
    args.client_core = client_core
    proc = start_server(server_core, args.itl_ms, args.lockstep,
                        spin=server_core is not None and not args.server_sleeps)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url:
        raise SystemExit("the fake llm server did not start")
    pinned = pin(0, client_core)
    print(f"CPU: {cpu_model()}, {len(cores)} cores visible; client pinned to core "
          f"{client_core}: {pinned}; server (fake_llmserver, no model) on core {server_core}; "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{args.output_tokens} tokens per stream, one per {args.itl_ms:g} ms"
          f"{', all streams in lockstep' if args.lockstep else ''}; "
          f"{args.seconds:g} s per rate; lag and gaps in ms")
    print(f"{'rate/s':>7} {'achieved':>8} {'ok':>6} {'streams':>8} {'tokens/s':>9} "
          f"{'lag p50':>8} {'lag p99':>8} {'lag max':>8} {'ITL p99':>8} {'srv p99':>8} "
          f"{'CPU':>7} {'us/token':>8} {'wake p99':>8} {'off-CPU':>8} {'load':>5}  verdict")
    lines = []
    try:
        if args.ab_rate > 0:
            reader_ab(url, args)
        for rate in args.rates:
            lines.append(run_one(url, rate, args))
            if lines[-1].lag_p50_ms > SATURATED_LAG_MS:
                print(f"stopped: median client lag over {SATURATED_LAG_MS:g} ms, the client (or "
                      "its core) is saturated; higher rates can only do worse")
                break
            if all(line.verdict.startswith("server behind") for line in lines[-2:]) and \
                    len(lines) >= 2:
                print("stopped: the server fell behind twice in a row; higher rates would "
                      "measure the server, not the client")
                break
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    sustained = [line for line in lines if line.verdict == "sustained"]
    if not sustained:
        floor = min((line.wake_p99_ms for line in lines), default=float("nan"))
        print(f"target not met: no tried rate kept client-lag p99 under {LAG_P99_LIMIT_MS:g} ms "
              f"on this machine now; its best bare wake-up p99 was {floor:.3f} ms"
              + (" (the machine's own floor is over the limit: rerun it on a quiet machine)"
                 if floor >= LAG_P99_LIMIT_MS else ""))
        return
    best = max(sustained, key=lambda line: line.streams)
    server_bound = any(line.rate > best.rate and line.verdict.startswith("server behind")
                       for line in lines)
    print(f"target met: {best.streams:.0f} concurrent streams and {best.tokens_per_s:.0f} "
          f"output tokens/s sustained on one client core at {best.rate:.0f} req/s "
          f"(client-lag p99 {best.lag_p99_ms:.3f} ms < {LAG_P99_LIMIT_MS:g} ms, achieved rate "
          "within 2%, every request answered, server on pace)"
          + ("; a lower bound: at a higher rate the server fell behind, so the client was not "
             "judged there" if server_bound else ""))


if __name__ == "__main__":
    main()
