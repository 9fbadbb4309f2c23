"""False refusals: requests `infertune serve` refused that it would have answered in time.

    .venv/bin/python benchmarks/false_shed.py [--target runs/demo | minilm] [--seconds 30]
        [--fractions 0.1,0.5,0.9] [--capacity RPS] [--shape poisson|scenario]
        [--capacity-mode open|closed] [--noise-floor]
        [--deadline-ms MS (A's --timeout-ms; a model reference has no policy deadline)]

1. starts two servers of the same target in their own processes: A as served (its policy's
   deadline, `infertune serve TARGET`), and B admitting everything (the same policy with
   --timeout-ms 1e9 and a queue of 100,000, so it never refuses on a deadline or a full queue);
2. measures the capacity (unless --capacity names it): first B's closed-loop throughput (kept
   saturated for a few seconds with 64 requests outstanding; answers per second over the second
   half), then, by default (--capacity-mode open), the highest open-loop rate at which B answers
   every request within the deadline at its p99 (a bisection below the closed-loop figure).
   The capacity of a server with a deadline is what it serves within that deadline: at 0.9 of
   the closed-loop figure the admit-all server's own p99 was already past the deadline (236,
   314 and 385 ms against 300 on runs/demo, 2-core AMX Xeon, 2026-12-06), so the requests it
   refuses there are mostly ones any rule would refuse, and two admit-all servers sent the same
   schedule disagreed on 42.7% of requests (--noise-floor). Each probe lasts as long as a
   point's window (--seconds): a burst long enough to queue past the deadline is rarer than
   8 s, so 8-second probes put the capacity at 496.3 req/s, and at 0.9 of it the admit-all
   server's own p99 over 30 s was 355 ms against 300 and a second one missed the deadline on
   4.8% of the requests the first answered within it (runs/demo, 2026-12-06).
   --capacity-mode closed keeps the closed-loop figure;
3. at each fraction of that capacity, one seeded schedule (Poisson, or with --shape scenario
   the run's traffic shape) and one set of bodies sent to A, then the same to B (one server
   driven at a time, the other idle); a request A refused (429/503/504) that B answered within
   A's deadline from its intended send time is a false refusal;
4. prints per fraction the requests, A's refusals, the false refusals and their share, B's
   answered p99, and a verdict against the issue's target (0 at 0.1 and 0.5 of capacity, under
   0.1% at 0.9); where there are false refusals, when A refused them, how fast B answered them
   and how fast each server answered the requests sent around them;
5. with --noise-floor, sends each schedule to a second admit-all server C as well and counts
   the requests C missed the deadline on that B answered within it: what a rule refusing
   exactly the requests that miss in its own run would count as false, the spread of two runs
   alone.

Figures are measured on this machine in this run; a busy machine shows as client lag, and B's
replay runs after A's, so drift of the machine between them shows as a difference too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import closed_loop as cl  # noqa: E402  (a sibling script, not a package)
import serve_goodput as sg  # noqa: E402

from infertune.config import Scenario, TrafficFacts  # noqa: E402
from infertune.data import default_heldout  # noqa: E402
from infertune.loadgen.result import SHED_STATUSES, RequestRecord, is_ok  # noqa: E402
from infertune.loadgen.runner import RunOptions, run_schedule  # noqa: E402
from infertune.loadgen.schedules import ScheduleSpec, build_schedule  # noqa: E402
from infertune.loadgen.targets import HttpTarget  # noqa: E402
from infertune.optimize.served.confirm import drive_http, request_bodies  # noqa: E402
from infertune.optimize.served.traffic import schedule_for  # noqa: E402

TARGETS = {0.1: 0.0, 0.5: 0.0, 0.9: 0.001}  # the bound on the false-refusal share
SATURATE_S = 4.0
IN_FLIGHT = 64  # outstanding requests while measuring capacity: several full batches queued


@dataclass
class Point:
    fraction: float
    rate: float
    sent: int
    refused: int  # by A: a shed status
    false: int  # refused by A, answered by B within A's deadline
    b_p99_ms: float
    lag_p99_ms: float
    floor: int | None = None  # --noise-floor: an ideal rule's false refusals (C against B)

    @property
    def share(self) -> float:
        return self.false / self.sent if self.sent else 0.0


def false_refusals(served: list[RequestRecord], admit_all: list[RequestRecord],
                   deadline_ms: float) -> tuple[int, int]:
    """(refused by the served run, of them answered in time by the admit-all replay); the two
    runs sent the same schedule, so records pair by index."""
    replay = {r.index: r for r in admit_all}
    refused = [r for r in served if r.status in SHED_STATUSES]
    false = [r for r in refused if (b := replay.get(r.index)) is not None and is_ok(b.status)
             and b.latency_ms <= deadline_ms]
    return len(refused), len(false)


def describe_false(served: list[RequestRecord], admit_all: list[RequestRecord],
                   deadline_ms: float) -> str:
    """Where the false refusals sit: when A refused them (ms from the intended send, by
    status) and how late B answered them; a refusal near the deadline beside an answer near it
    is the two runs' spread at the edge, one far before it is the estimate refusing early."""
    replay = {r.index: r for r in admit_all}
    pairs = [(r, replay[r.index]) for r in served if r.status in SHED_STATUSES
             and r.index in replay and is_ok(replay[r.index].status)
             and replay[r.index].latency_ms <= deadline_ms]
    statuses = sorted({a.status for a, _ in pairs})
    a_ms = np.array([a.latency_ms for a, _ in pairs])
    b_ms = np.array([b.latency_ms for _, b in pairs])
    # each server's answered latencies within half a second of the refused requests' sends:
    # a window where A answered everyone slower than B is the runs' spread, not the rule
    near = [r.index for r in served if any(abs(r.intended_s - a.intended_s) <= 0.5
                                           for a, _ in pairs)]
    a_near = [r.latency_ms for r in served if r.index in set(near) and is_ok(r.status)]
    b_near = [replay[i].latency_ms for i in near if i in replay and is_ok(replay[i].status)]
    return (f"false refusals ({', '.join(statuses)}): A refused them {a_ms.min():.0f}-"
            f"{a_ms.max():.0f} ms after the intended send (median {np.median(a_ms):.0f}); B "
            f"answered them in {b_ms.min():.0f}-{b_ms.max():.0f} ms (median "
            f"{np.median(b_ms):.0f}); the requests sent within 0.5 s of them, answered: A "
            f"median {np.median(a_near) if a_near else float('nan'):.0f} ms, B median "
            f"{np.median(b_near) if b_near else float('nan'):.0f} ms")


def _serve(target: str, port: int, *extra: str) -> Any:
    """`infertune serve TARGET` (a run folder or a model reference) in its own process."""
    return cl.start_run_server(Path(target), port, *extra)


class Bodies:
    """The benchmark's request bodies: one seeded order (request_bodies) handed out in
    consecutive slices, so neither server is ever sent a text twice and its response cache
    (on, as served) answers nothing from memory. (Each run once took the order from its start:
    B had cached the capacity run's texts, and A and B had not seen the same texts before a
    point, so their times differed by what each had cached.)"""

    def __init__(self, inputs: list[Any], seed: int) -> None:
        self.inputs, self.seed, self.used = inputs, seed, 0

    def take(self, count: int) -> list[dict[str, Any]]:
        start, self.used = self.used, self.used + count
        return request_bodies(self.inputs, self.used, seed=self.seed)[start:]


def measure_capacity(url: str, bodies: Bodies, seed: int) -> float:
    """B saturated by IN_FLIGHT requests held outstanding at all times (a schedule far past
    any capacity, capped client-side): answers per second over the second half of the run,
    once the batches have filled."""
    sched = build_schedule(ScheduleSpec("constant", rate=5000.0, duration_s=SATURATE_S,
                                        seed=seed))
    target = HttpTarget(url + "/v1/predict", bodies=bodies.take(len(sched)), timeout_s=60)
    records = asyncio.run(run_schedule(sched, target, RunOptions(max_in_flight=IN_FLIGHT)))
    done = np.sort([r.done_s for r in records if is_ok(r.status)])
    if done.size < 20:
        raise SystemExit(f"capacity: the admit-all server answered {done.size} requests")
    half = done[done.size // 2:]
    return float((half.size - 1) / (half[-1] - half[0]))


def open_loop_capacity(url: str, traffic: TrafficFacts, closed: float, texts: Bodies,
                       deadline_ms: float, seed: int, probe_s: float = 30.0,
                       probes: int = 6) -> float:
    """The highest open-loop rate (the traffic's shape) at which B, admitting everything,
    answers every request 2xx with its p99 within the deadline: a bisection between 0.3 and 1.0
    of the closed-loop capacity, ``probes`` probes of ``probe_s`` seconds. The closed-loop
    figure (64 requests held outstanding) is B's throughput with its batches always full; an
    open-loop client on the same cores, with arrivals that bunch, sustains less."""
    low, high = 0.3 * closed, closed
    for k in range(probes):
        rate = (low + high) / 2
        sched = schedule_for(traffic, rate, seed=seed + k, duration_s=probe_s)
        records = drive_http(url, sched, texts.take(len(sched)), timeout_s=60).records
        ok = np.sort([r.latency_ms for r in records if is_ok(r.status)])
        holds = (ok.size == len(records) and ok.size > 0
                 and float(np.percentile(ok, 99)) <= deadline_ms)
        print(f"  open-loop probe {rate:7.1f} req/s: p99 "
              f"{float(np.percentile(ok, 99)) if ok.size else float('inf'):7.1f} ms, "
              f"{len(records) - ok.size} not 2xx -> {'holds' if holds else 'does not'}",
              flush=True)
        low, high = (rate, high) if holds else (low, rate)
    return low


def traffic_for(target: str, shape: str) -> TrafficFacts:
    if shape == "scenario" and Path(target, "run.json").is_file():
        record = json.loads(Path(target, "run.json").read_text())
        return Scenario.from_dict(record["scenario"], source=target).traffic
    return TrafficFacts(pattern="steady")


def inputs_for(target: str) -> tuple[list[Any], str]:
    if Path(target, "run.json").is_file():
        return cl.heldout_inputs(json.loads(Path(target, "run.json").read_text()))
    held = default_heldout()
    return held.inputs, held.source


def shed_counts(url: str) -> dict[str, float]:
    """A's infertune_shed_total by reason, read from its /metrics."""
    text = httpx.get(url + "/metrics", timeout=10).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("infertune_shed_total{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            out[reason] = float(line.rsplit(" ", 1)[1])
    return out


def ideal_rule_false(admit_all: list[RequestRecord], again: list[RequestRecord],
                     deadline_ms: float) -> int:
    """Requests a second admit-all server (C) answered past the deadline or not at all, that
    B answered within it: what a rule refusing exactly the requests that miss in its own run
    would count as false, the two runs' spread alone (the benchmark's noise floor)."""
    replay = {r.index: r for r in admit_all}
    return sum(1 for r in again
               if not (is_ok(r.status) and r.latency_ms <= deadline_ms)
               and (b := replay.get(r.index)) is not None and is_ok(b.status)
               and b.latency_ms <= deadline_ms)


def run_point(urls: tuple[str, ...], traffic: TrafficFacts, fraction: float, capacity: float,
              seconds: float, texts: Bodies, deadline_ms: float, seed: int) -> Point:
    rate = fraction * capacity
    sched = schedule_for(traffic, rate, seed=seed, duration_s=seconds)
    bodies = texts.take(len(sched))  # the same to A and to B, new to both
    before = shed_counts(urls[0])
    served = drive_http(urls[0], sched, bodies, timeout_s=60).records
    after = shed_counts(urls[0])
    why = {k: int(v - before.get(k, 0.0)) for k, v in after.items() if v > before.get(k, 0.0)}
    if why:
        print(f"  {fraction:.1f} x capacity: A's shed_total by reason {why}", flush=True)
    replay = drive_http(urls[1], sched, bodies, timeout_s=60).records
    refused, false = false_refusals(served, replay, deadline_ms)
    if false:
        print("  " + describe_false(served, replay, deadline_ms), flush=True)
    floor = None
    if len(urls) > 2:  # --noise-floor: the same schedule and bodies to a second admit-all
        floor = ideal_rule_false(replay, drive_http(urls[2], sched, bodies,
                                                    timeout_s=60).records, deadline_ms)
    ok_b = np.sort([r.latency_ms for r in replay if is_ok(r.status)])
    lags = [r.lag_ms for r in served + replay]
    return Point(fraction, rate, len(served), refused, false,
                 float(np.percentile(ok_b, 99)) if ok_b.size else float("inf"),
                 float(np.percentile(lags, 99)) if lags else 0.0, floor)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="runs/demo", help="a run folder or a model reference")
    ap.add_argument("--seconds", type=float, default=30.0, help="per fraction and server")
    ap.add_argument("--fractions", default="0.1,0.5,0.9")
    ap.add_argument("--capacity", type=float, default=None, help="req/s; default: measured")
    ap.add_argument("--shape", choices=("poisson", "scenario"), default="poisson")
    ap.add_argument("--capacity-mode", choices=("closed", "open"), default="open",
                    help="closed: B's throughput with 64 requests outstanding; open: the "
                    "highest open-loop rate B holds within the deadline (open_loop_capacity)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--deadline-ms", type=float, default=None,
                    help="serve A with this --timeout-ms (default: the target's own policy)")
    ap.add_argument("--noise-floor", action="store_true",
                    help="also send each schedule to a second admit-all server C and count "
                    "what a rule refusing exactly its own misses would call false (C against B)")
    args = ap.parse_args()
    fractions = [float(f) for f in args.fractions.split(",")]
    inputs, source = inputs_for(args.target)
    ports = tuple(sg.free_port() for _ in range(3 if args.noise_floor else 2))
    own = ["--timeout-ms", f"{args.deadline_ms:g}"] if args.deadline_ms else []
    admit_all = ("--timeout-ms", "1000000000", "--max-queue", "100000")
    procs = [_serve(args.target, ports[0], *own),
             *(_serve(args.target, port, *admit_all) for port in ports[1:])]
    urls = tuple(f"http://127.0.0.1:{port}" for port in ports)
    try:
        for port, proc in zip(ports, procs, strict=True):
            cl.wait_ready(port, proc)
        config = httpx.get(urls[0] + "/v1/config", timeout=10).json()["policy"]
        deadline_ms = config.get("timeout_ms")
        if not deadline_ms:
            raise SystemExit(f"{args.target}: the served policy sets no timeout_ms, so no "
                             "refusal is on a stated deadline; pass a run whose policy does")
        texts = Bodies(inputs, args.seed)
        traffic = traffic_for(args.target, args.shape)
        capacity = args.capacity or measure_capacity(urls[1], texts, args.seed + 100)
        how = ("given" if args.capacity else f"measured: the admit-all server saturated for "
               f"{SATURATE_S:g} s with {IN_FLIGHT} requests outstanding")
        if args.capacity_mode == "open" and not args.capacity:
            closed = capacity
            capacity = open_loop_capacity(urls[1], traffic, closed, texts, deadline_ms,
                                          args.seed + 200, probe_s=args.seconds)
            how = (f"measured open-loop: the highest rate of {args.shape} arrivals the "
                   f"admit-all server answered within the {deadline_ms:g} ms deadline at its "
                   f"p99; closed-loop {closed:.1f} req/s")
        print(f"target {args.target}; served deadline timeout_ms {deadline_ms:g}; capacity "
              f"{capacity:.1f} req/s ({how}); shape {args.shape}; inputs: {source}",
              flush=True)
        failed = False
        for k, fraction in enumerate(fractions):
            p = run_point(urls, traffic, fraction, capacity, args.seconds, texts, deadline_ms,
                          seed=args.seed + k)
            bound = TARGETS.get(fraction)
            ok = bound is None or (p.share <= bound if bound else p.false == 0)
            failed |= not ok
            print(f"{fraction:.1f} x capacity = {p.rate:7.1f} req/s  sent {p.sent:6d}  "
                  f"refused {p.refused:5d}  false refusals {p.false:4d} "
                  f"({100 * p.share:.3f}%)  admit-all p99 {p.b_p99_ms:7.1f} ms  client-lag "
                  f"p99 {p.lag_p99_ms:6.1f} ms  -> "
                  f"{'n/a' if bound is None else ('met' if ok else 'NOT met')} "
                  f"(target {'none' if bound is None else f'<= {100 * bound:g}%'})", flush=True)
            if p.floor is not None:
                print(f"  noise floor: a second admit-all server missed the deadline on "
                      f"{p.floor} requests B answered within it "
                      f"({100 * p.floor / max(p.sent, 1):.3f}%)", flush=True)
    finally:
        for proc in procs:
            sg.stop(proc)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
