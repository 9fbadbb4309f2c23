"""`infertune serve --engine ray` under a load step, on this machine, in one run:

  goodput     the highest rate (of --rates x the plan's capacity estimate) that one and then two
              pinned replicas serve with p99 <= --slo-ms and < 1% errors
  step        under the plan re-derived with that measured goodput at --slo-ms: low (--low x
              goodput of 1) for --low-s, then high (--high x goodput of 1) for --step-s, twice:
              once from a warm pool of 1 replica (the autoscaler must add the second) and once
              from a warm pool of 2; prints the time from the step to the second replica
              RUNNING (Ray Serve's own status, polled by this driver) and the p99 of the
              requests sent during the step

Latency is taken from each request's intended send time (open loop, infertune.loadgen), and
every request carries new texts so no replica's cache answers. The replicas, Ray's proxy and
this load generator share the machine's cores: on a 2-core machine two replicas cannot double
one replica's goodput, and the ratio printed says by how much they do.

    .venv/bin/python benchmarks/ray_scaling.py                 # about 6-10 minutes on 2 cores
    .venv/bin/python benchmarks/ray_scaling.py --model /path/to/model --slo-ms 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from infertune.config import ServePolicy
from infertune.loadgen.result import RequestRecord, is_ok
from infertune.loadgen.runner import RunOptions, run_schedule
from infertune.loadgen.schedules import ScheduleSpec, build_schedule
from infertune.loadgen.targets import HttpTarget
from infertune.serve.engines.autoscale import AutoscalePlan, Demand
from infertune.serve.engines.ray_engine import RayEngine, RayOptions
from infertune.serve.engines.replica import ModelApp
from infertune.serve.engines.run_facts import Sourced

WORDS = ("how do i reset my password the quarterly report shows revenue grew while costs "
         "stayed flat fast inference matters when users wait for every answer").split()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def send(url: str, rate: float, seconds: float, seed: int) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    bodies = [{"inputs": [" ".join(rng.choice(WORDS, size=10)) + f" {seed}.{i}"]}
              for i in range(max(64, int(rate * seconds) + 1))]
    schedule = build_schedule(ScheduleSpec(shape="poisson", rate=rate, duration_s=seconds,
                                           seed=seed))
    target = HttpTarget(url + "/v1/predict", bodies=bodies, timeout_s=120.0)
    return asyncio.run(run_schedule(schedule, target, RunOptions()))


def p99_ms(records: list[RequestRecord]) -> float:
    return float(np.percentile([r.latency_ms for r in records], 99)) if records else float("nan")


def error_share(records: list[RequestRecord]) -> float:
    return sum(not is_ok(r.status) for r in records) / max(1, len(records))


def goodput(url: str, rates: list[float], seconds: float, slo_ms: float,
            seed: int) -> tuple[float, list[dict[str, Any]]]:
    """Highest passing rate; stops after two failing rates in a row."""
    best, rows, fails = 0.0, [], 0
    for i, rate in enumerate(rates):
        records = send(url, rate, seconds, seed + i)
        row = {"rate": rate, "p99_ms": p99_ms(records), "errors": error_share(records),
               "n": len(records)}
        rows.append(row)
        print(f"    {rate:7.1f} req/s: p99 {row['p99_ms']:8.1f} ms, errors "
              f"{row['errors']:.1%} (n={row['n']})", flush=True)
        if row["p99_ms"] <= slo_ms and row["errors"] < 0.01:
            best, fails = rate, 0
        else:
            fails += 1
            if fails == 2:
                break
    return best, rows


def step(engine: RayEngine, url: str, low: float, high: float, low_s: float, step_s: float,
         seed: int) -> dict[str, Any]:
    send(url, low, low_s, seed)
    seen: list[tuple[float, int]] = []
    stop = threading.Event()
    t0 = time.monotonic()

    def watch() -> None:
        while not stop.is_set():
            seen.append((time.monotonic() - t0, engine.running_replicas()))
            stop.wait(0.25)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    records = send(url, high, step_s, seed + 1)
    stop.set()
    thread.join()
    up = next((t for t, n in seen if n >= 2), None)
    return {"p99_ms": p99_ms(records), "errors": error_share(records), "n": len(records),
            "scale_up_s": up, "replicas_at_start": seen[0][1] if seen else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    parser.add_argument("--slo-ms", type=float, default=250.0)
    parser.add_argument("--rates",
                        default="0.05,0.1,0.15,0.2,0.25,0.3,0.35,0.4,0.5,0.6,0.7,0.8,1.0",
                        help="fractions of the plan's per-replica capacity estimate")
    parser.add_argument("--rate-s", type=float, default=6.0)
    parser.add_argument("--warm-s", type=float, default=4.0,
                        help="untimed low-rate traffic after each redeploy (first requests "
                        "through fresh replicas and the proxy's new connections are slow)")
    parser.add_argument("--low", type=float, default=0.3)
    parser.add_argument("--high", type=float, default=1.6)
    parser.add_argument("--low-s", type=float, default=8.0)
    parser.add_argument("--step-s", type=float, default=None,
                        help="step length (default: 2 x the measured cold start + 10 s, so the "
                        "autoscaler has time to add a replica)")
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    args = parser.parse_args()

    policy = ServePolicy(max_batch_size=args.max_batch_size, max_wait_ms=args.max_wait_ms,
                         timeout_ms=60_000)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    engine = RayEngine(ModelApp(args.model, policy), policy,
                       RayOptions(port=port, plan_path=Path("ray_scaling_plan.json")),
                       echo=lambda line: print("  " + line[:160], flush=True))
    out: dict[str, Any] = {"model": args.model, "slo_ms": args.slo_ms}
    try:
        print("starting Ray and measuring one replica ...", flush=True)
        plan: AutoscalePlan = engine.start()
        out["plan"] = plan.to_dict()
        capacity = plan.replica_capacity_rps.value
        rates = [round(f * capacity, 1) for f in map(float, args.rates.split(","))]
        found: dict[int, float] = {}
        for n in (1, 2):
            print(f"goodput of {n} pinned replica(s):", flush=True)
            engine.apply(plan, min_replicas=n, max_replicas=n)
            send(url, rates[0], args.warm_s, seed=900 + n)  # untimed: fresh replicas, proxy
            found[n], out[f"goodput_{n}_rows"] = goodput(url, rates, args.rate_s, args.slo_ms,
                                                         seed=1000 * n)
        out["goodput"] = found
        base = found[1] or rates[0]
        # the steps run under the plan re-derived with the measured goodput at --slo-ms
        step_plan = engine.derive(
            goodput=Sourced(base, "measured: goodput of one pinned replica in this benchmark"),
            demand=Demand(slo_ms=args.slo_ms, slo_source="--slo-ms"))
        out["step_plan"] = step_plan.to_dict()
        print("  step plan: " + step_plan.lines()[0][:200], flush=True)
        assert engine.measured is not None
        step_s = args.step_s or 2 * engine.measured.cold_start_s + 10.0
        low, high = args.low * base, args.high * base
        for pool in (1, 2):
            print(f"step {low:.1f} -> {high:.1f} req/s for {step_s:.0f} s from a warm pool of "
                  f"{pool}:", flush=True)
            engine.apply(step_plan, min_replicas=pool, max_replicas=2)
            send(url, low, args.warm_s, seed=950 + pool)  # untimed
            out[f"step_pool_{pool}"] = step(engine, url, low, high, args.low_s, step_s,
                                            seed=5000 + pool)
    finally:
        engine.stop()
    cold, warm = out["step_pool_1"], out["step_pool_2"]
    print("\nresults (this machine, shared with whatever else runs on it):")
    print(f"  goodput, p99 <= {args.slo_ms:g} ms: 1 replica {found[1]:.1f} req/s, 2 replicas "
          f"{found[2]:.1f} req/s, ratio {found[2] / found[1]:.2f}" if found[1] else
          f"  goodput: 1 replica met the SLO at no rate tried ({rates})")
    up = cold["scale_up_s"]
    print("  time to scale up (step -> second replica RUNNING), pool of 1: "
          + (f"{up:.1f} s" if up is not None else "not within the step"))
    print(f"  p99 during the step: pool of 1 {cold['p99_ms']:.0f} ms (errors "
          f"{cold['errors']:.1%}, n={cold['n']}), pool of 2 {warm['p99_ms']:.0f} ms (errors "
          f"{warm['errors']:.1%}, n={warm['n']}), ratio {cold['p99_ms'] / warm['p99_ms']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
