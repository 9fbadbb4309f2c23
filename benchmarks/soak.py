"""Soak: `infertune serve` at 70% of capacity for 10 minutes; RSS growth and p99 drift.

    .venv/bin/python benchmarks/soak.py [--minutes 10] [--service-ms 50]
    .venv/bin/python benchmarks/soak.py --model minilm --capacity-rps 75 --input-kind text

The default model takes a fixed time per batch of <= 4 (tests/helpers/serve_fault_models.py),
so its capacity is 4 / service time; for another model pass its measured --capacity-rps. The
load is open-loop (latency from the intended send time) in one-minute windows; each window
prints requests sent, ok, shed, lost, the admitted p99 and the server's RSS after it. The
summary is RSS growth from the end of the first window to the end of the last (the first
window holds warm-up allocations) and p99 drift (last window's p99 / first window's). Exits 1
on any lost request or 5xx other than 503.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))
import serve_fault_lib as faults  # noqa: E402 - server process and open-loop client


def _text(i: int) -> dict[str, Any]:
    return {"inputs": [f"soak request {i}: how long does a served model stay healthy?"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--service-ms", type=float, default=50.0)
    parser.add_argument("--model", default="serve_fault_models:factory")
    parser.add_argument("--capacity-rps", type=float, default=None,
                        help="measured capacity of --model (default: 4 / service time)")
    parser.add_argument("--input-kind", choices=("vector", "text"), default="vector")
    args = parser.parse_args()
    capacity = args.capacity_rps or 4 / (args.service_ms / 1000)
    rate = 0.7 * capacity
    body = faults.vector if args.input_kind == "vector" else _text
    print(f"# {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start; "
          f"{args.model} at {rate:g} req/s (70% of {capacity:g}) for {args.minutes} min")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        server = faults.ServeProcess(Path(tmp), service_ms=args.service_ms, model=args.model)
        with server.running():
            print(f"{'minute':>6} {'sent':>6} {'ok':>6} {'shed':>6} {'lost':>5} {'5xx':>5} "
                  f"{'p99 ms':>8} {'RSS MB':>8}  client lag p99 ms")
            for minute in range(1, args.minutes + 1):
                offset = minute * 10**6  # inputs unique across windows: no cache hits

                def unique(i: int, offset: int = offset) -> dict[str, Any]:
                    return body(offset + i)

                load = asyncio.run(faults.open_loop(server.url, rate, 60.0, unique))
                row = faults.FaultRow.of(f"minute {minute}", load)
                rss = server.rss_mb()
                rows.append((row, rss))
                p99 = "-" if row.p99_ms is None else f"{row.p99_ms:.1f}"
                print(f"{minute:>6} {row.sent:>6} {row.ok:>6} {row.shed:>6} {row.lost:>5} "
                      f"{row.other_5xx:>5} {p99:>8} {rss:>8.1f}  {load.lag_p99_ms:.1f}",
                      flush=True)
    (first, rss0), (last, rss1) = rows[0], rows[-1]
    drift = (last.p99_ms / first.p99_ms) if first.p99_ms and last.p99_ms else float("nan")
    print(f"RSS growth after the first minute: {rss1 - rss0:+.1f} MB ({rss0:.1f} -> "
          f"{rss1:.1f}); p99 drift last/first minute: {drift:.2f}x")
    bad = sum(r.lost + r.other_5xx for r, _ in rows)
    if bad:
        print(f"FAIL {bad} requests lost or answered 5xx other than 503")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
