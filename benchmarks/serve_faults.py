"""Serve under faults: for each fault, requests sent, failed, shed, lost and the admitted p99.

    .venv/bin/python benchmarks/serve_faults.py [--service-ms 100] [--seconds 10]

Each fault runs against a real `infertune serve` process whose model takes a fixed time per
batch of <= 4 (tests/helpers/serve_fault_models.py), so capacity is 4 / service time; the
scenarios are the ones tests/integration/serve/test_serve_faults.py asserts on, run longer:

    redis hang, then kill   SIGSTOP Redis at 25% of the run, SIGCONT at 50%, SIGKILL at 75%
    model raises on inputs  every 5th request holds an input the model raises on
    stalled model call      one batch stalls 3 s (workers=1) under half-capacity load
    slow clients            200 sockets trickle headers, 3 trickle bodies (body_timeout_s 1)
    3x capacity             open loop at 3x capacity for 30 s, no deadline configured
    SIGTERM under load      SIGTERM at 40% of the run, one connection per request

Columns: ok (200), failed (4xx other than 429: the request's own fault, e.g. the poisoned
inputs' 422, the trickled bodies' 408), shed (429/503), refused (connection refused: never
accepted), lost (accepted, then no answer), 5xx (other than 503), p99 of the admitted (200)
requests from their intended send time; the notes add that p99 from the actual send (client
lag left out) and from queue entry (Server-Timing). Exits 1 on any lost request, any 5xx
other than 503, or a 3x-capacity admitted p99 from queue entry above the bound the server
states on /readyz (answer_bound_ms: the default deadline plus one batch time, after which a
request still unanswered gets 503).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))
import serve_fault_lib as faults  # noqa: E402 - the scenarios shared with the fault tests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service-ms", type=float, default=100.0,
                        help="the fake model's time per batch (capacity = 4 / this)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="length of each fault's run (the 3x run is always 30 s)")
    args = parser.parse_args()
    capacity = 4 / (args.service_ms / 1000)
    rate = capacity / 2
    print(f"# {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start (a busy "
          f"host inflates p99 and client lag); capacity {capacity:g} req/s, "
          f"fault load {rate:g} req/s", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        redis = faults.RedisProcess(work).start()
        server = faults.ServeProcess(work, service_ms=args.service_ms,
                                     policy={"redis_url": redis.url, "body_timeout_s": 1})
        print(faults.HEADER, flush=True)
        with server.running():
            runs: list[Callable[[], faults.FaultRow]] = [
                lambda: faults.redis_hang_then_kill(server, redis, rate, args.seconds),
                lambda: faults.poisoned_inputs(server, rate / 2, args.seconds),
                lambda: faults.slow_clients(server, 200, 3, int(rate * args.seconds / 4), 3),
                lambda: faults.overload(server, capacity, 3, 30),
                lambda: faults.stalled_call(server, rate, max(args.seconds, 5)),
            ]
            for run in runs:
                rows.append(run())
                print(rows[-1].line(), flush=True)
        redis.stop()
        fresh = faults.ServeProcess(work, service_ms=args.service_ms).start()
        try:
            rows.append(faults.sigterm_under_load(fresh, rate, args.seconds))
        finally:
            fresh.stop()
        print(rows[-1].line(), flush=True)
    return _verdict(rows)


def _verdict(rows: list[faults.FaultRow]) -> int:
    problems = [f"{r.fault}: {r.lost} lost" for r in rows if r.lost]
    problems += [f"{r.fault}: {r.other_5xx} 5xx other than 503" for r in rows if r.other_5xx]
    for row in rows:
        bound = row.notes.get("bound_ms")
        p99 = row.notes.get("server_p99_ms")
        if bound is not None and p99 is not None and p99 > bound:
            problems.append(f"{row.fault}: admitted p99 from queue entry {p99:.0f} ms > the "
                            f"stated bound {bound:.0f} ms")
    for problem in problems:
        print(f"FAIL {problem}")
    if not problems:
        print("OK: no request lost, no 5xx other than 503, 3x-capacity p99 within the bound")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
