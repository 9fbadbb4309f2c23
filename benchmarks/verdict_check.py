"""Do the report's SLO verdicts reproduce? A fresh measurement beside each verdict.

    .venv/bin/python benchmarks/verdict_check.py --run runs/demo [--seconds 60] [--seed 2027]

1. reads report.json's "At the SLO" section: per rate (mean, peak) and SLO percentile, the
   verdict (meets / misses / not shown) and its interval (97.5% when the confirmation could
   look twice; the report records each one's confidence);
2. starts `infertune serve RUN` (the recommended configuration, as report.json names it) in
   its own process and drives it over HTTP, open-loop, for --seconds at the scenario's mean and
   then its peak rate with the scenario's traffic shape, on a new seed (not the confirmation's)
   and new texts: the run's held-out inputs in a new seeded order, each with a marker word
   appended (" vc<seed>n<i>"), so no body equals one the confirmation sent (the markers add a
   couple of tokens to each text);
3. computes the new measurement's interval and verdict by the report's own rule (pooled
   answered latencies, measure/tail_interval.py over the traffic's burst blocks) and prints
   them beside the report's, per point;
4. a report verdict is contradicted when the report says "meets" and the new interval lies
   wholly above the target ("misses"), or the report says "misses" and the new one lies wholly
   below; "not shown" in the report promises nothing. Exit 0: no contradiction; 1: one or more.

The issue asks for no contradiction on two runs: run it twice (another --seed each time).
Figures are measured on this machine in this run; a busy machine shows as client lag.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import closed_loop as cl  # noqa: E402  (a sibling script, not a package)
import serve_goodput as sg  # noqa: E402

from infertune.config import Scenario  # noqa: E402
from infertune.measure.tail_interval import TailInterval, verdict  # noqa: E402
from infertune.optimize.findings import as_v2  # noqa: E402
from infertune.optimize.served.confirm import drive_http, pooled  # noqa: E402
from infertune.optimize.served.traffic import burst_block_s, schedule_for  # noqa: E402

CONTRADICTS = {("meets", "misses"), ("misses", "meets")}


def fresh_bodies(inputs: list[Any], count: int, seed: int,
                 label: str = "") -> list[dict[str, Any]]:
    """``count`` bodies: the inputs in a new seeded order, each text with its own marker (the
    rate label in it, so the one server driven at both rates never sees a text twice: its
    response cache would answer the repeat)."""
    order = np.random.default_rng(seed).permutation(len(inputs))
    out = []
    for i in range(count):
        item = inputs[int(order[i % len(inputs)])]
        text = f"{item} vc{seed}{label}n{i}" if isinstance(item, str) else item
        out.append({"inputs": [text]})
    return out


def shown(low: float | None, high: float | None) -> str:
    return (f"[{'?' if low is None else f'{low:.1f}'}, "
            f"{'unbounded' if high is None else f'{high:.1f}'}]")


def report_checks(report: dict[str, Any], label: str) -> dict[str, dict[str, Any]]:
    point = cl.report_point(report, label)
    return {c["key"]: c for c in point.get("checks", [])}


def check_point(url: str, scenario: Scenario, label: str, rate: float, seconds: float,
                inputs: list[Any], seed: int, report: dict[str, Any]) -> list[str]:
    """Drive one rate; print each SLO percentile's two verdicts; the contradictions."""
    sched = schedule_for(scenario.traffic, rate, seed=seed, duration_s=seconds)
    seg = drive_http(url, sched, fresh_bodies(inputs, len(sched), seed, label), timeout_s=60.0)
    val = pooled([seg], rate, block_s=burst_block_s(sched.spec), seed=seed)
    theirs = report_checks(report, label)
    bad: list[str] = []
    print(f"{label} {rate:g} req/s: sent {val.stats.requests}, achieved "
          f"{val.achieved_rate:.1f} req/s, not answered 2xx {100 * val.stats.shed:.2f}%, "
          f"client-lag p99 {val.client_lag_p99_ms or 0.0:.1f} ms", flush=True)
    for key, target in scenario.slo.targets().items():
        new: TailInterval | None = val.intervals.get(key)
        new_verdict, _ = verdict(new, target) if new is not None else ("not shown", "")
        old = theirs.get(key)
        old_verdict = old["verdict"] if old else "absent"
        old_text = (f"{old['value']:.1f} {shown(old.get('low'), old.get('high'))} "
                    f"{100 * old.get('confidence', 0.95):g}% n={old['samples']}" if old
                    else "no interval in report.json")
        new_text = (f"{new.value:.1f} {shown(new.low, new.high)} n={new.samples}, "
                    f"{new.blocks} x {new.block_s:g} s blocks" if new else "nothing answered")
        clash = (old_verdict, new_verdict) in CONTRADICTS
        if clash:
            bad.append(f"{label} {key}")
        print(f"  {key} <= {target:g} ms: report {old_verdict:<9} {old_text:<32} | new "
              f"{new_verdict:<9} {new_text}  -> {'CONTRADICTED' if clash else 'consistent'}",
              flush=True)
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, default=Path("runs/demo"))
    ap.add_argument("--seconds", type=float, default=60.0, help="per rate")
    ap.add_argument("--seed", type=int, default=2027, help="not the confirmation's seed")
    args = ap.parse_args()
    report = json.loads((args.run / "report.json").read_text())
    record = as_v2(json.loads((args.run / "run.json").read_text()))
    scenario = Scenario.from_dict(record["scenario"], source=str(args.run / "run.json"))
    mean = scenario.traffic.mean_rps or scenario.current.rps
    peak = scenario.traffic.peak_rps or mean
    if not mean or not peak:
        raise SystemExit(f"{args.run}: the scenario states no request rate to drive")
    used = (record["confirm"].get("confirmation") or {}).get("seed")
    if used is not None and used == args.seed:
        raise SystemExit(f"--seed {args.seed} is the confirmation's own; pass another")
    inputs, source = cl.heldout_inputs(record)
    port = sg.free_port()
    proc = cl.start_run_server(args.run, port)
    bad: list[str] = []
    try:
        cl.wait_ready(port, proc)
        config = httpx.get(f"http://127.0.0.1:{port}/v1/config", timeout=10).json()
        print(f"serving {config['model']['id']} (policy {report['serving']['policy_id']}, "
              f"timeout_ms {config['policy'].get('timeout_ms')}); traffic "
              f"{scenario.traffic.pattern or 'steady'}; seed {args.seed} (confirmation's: "
              f"{used}); {args.seconds:g} s per rate; new texts from {source}", flush=True)
        for label, rate in (("mean", mean), ("peak", peak)):
            bad += check_point(f"http://127.0.0.1:{port}", scenario, label, rate,
                               args.seconds, inputs, args.seed, report)
    finally:
        sg.stop(proc)
    print(f"VERDICT verdict check: {'no' if not bad else len(bad)} contradiction(s)"
          + (f" ({', '.join(bad)})" if bad else "") + " of the report's meets/misses by the "
          "new interval", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
