"""The highest request rate the HTTP load generator sustains on one core against a trivial
local server, with client-lag p99 under 1 ms (and the achieved rate within 2% of the target).

The server (infertune.loadgen.localserver, aiohttp, answers at once) runs as a separate process
pinned to another core when the machine has one; this process (the client) is pinned to one
core. Rates are tried upward on a constant schedule; each line is one measured run. "wake p99"
is measured just before each run: how late a bare 0.2-3 ms timer sleep wakes on the client core
(p99 of 300), the machine's own floor; when it is near 1 ms no client can show the target.

    .venv/bin/python benchmarks/loadgen_capacity.py [--seconds 3] [--rates 250 500 ...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import time

import numpy as np

from infertune.loadgen import HttpTarget, ScheduleSpec, build_schedule, run_load
from infertune.loadgen.precise_loop import precise_runner

LAG_P99_LIMIT_MS = 1.0


def cpu_model() -> str:
    """The CPU's name as /proc/cpuinfo gives it (else what platform knows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def wake_p99_ms(count: int = 300) -> float:
    """p99 of how late a bare precise-loop sleep wakes (ms): the machine's wake-up floor."""
    async def probe() -> list[float]:
        rng = np.random.default_rng(0)
        late = []
        for delay in rng.uniform(0.0002, 0.003, count):
            start = time.perf_counter()
            await asyncio.sleep(delay)
            late.append((time.perf_counter() - start - delay) * 1e3)
        return late

    with precise_runner() as loop:
        return float(np.percentile(loop.run(probe()), 99))


def pin(pid: int, core: int) -> bool:
    try:
        os.sched_setaffinity(pid, {core})
        return True
    except (AttributeError, OSError):
        return False


def start_server(core: int | None) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "infertune.loadgen.localserver", "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if core is not None:
        pin(proc.pid, core)
    return proc, url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rates", type=float, nargs="+",
                        default=[100, 250, 500, 1000, 1500, 2000, 3000])
    args = parser.parse_args()

    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    client_core = cores[0]
    server_core = cores[1] if len(cores) > 1 else None
    proc, url = start_server(server_core)
    pinned = pin(0, client_core)
    print(f"CPU: {cpu_model()}; client pinned to core {client_core}: {pinned}; server on core "
          f"{server_core} ({len(cores)} cores visible; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())})")
    print(f"{'target/s':>9} {'achieved/s':>10} {'ok':>6} {'lag p50 ms':>10} {'lag p99 ms':>10} "
          f"{'lat p50 ms':>10} {'lat p99 ms':>10} {'wake p99':>8}  verdict")
    best = None  # every rate is tried: on a shared machine a stall can fail one run alone
    try:
        for rate in args.rates:
            schedule = build_schedule(ScheduleSpec(shape="constant", rate=rate,
                                                   duration_s=args.seconds))
            wake = wake_p99_ms()
            result = run_load(schedule, HttpTarget(url))
            lag = result.client_lag_ms
            within = abs(result.achieved_rate - rate) <= 0.02 * rate
            ok = lag["p99"] < LAG_P99_LIMIT_MS and within and result.ok == result.sent
            lat = result.latency
            print(f"{rate:9.0f} {result.achieved_rate:10.1f} {result.ok:6d} {lag['p50']:10.3f} "
                  f"{lag['p99']:10.3f} {lat.p50 if lat else float('nan'):10.2f} "
                  f"{lat.p99 if lat else float('nan'):10.2f} {wake:8.3f}  "
                  f"{'sustained' if ok else 'no'}", flush=True)
            if ok:
                best = rate
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    if best is None:
        print("no tried rate kept client-lag p99 under 1 ms on this machine now")
    else:
        print(f"highest sustained rate: {best:.0f} req/s on one client core "
              f"(client-lag p99 < {LAG_P99_LIMIT_MS:g} ms, achieved within 2%)")


if __name__ == "__main__":
    main()
