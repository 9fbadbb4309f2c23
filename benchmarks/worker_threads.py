"""One onnxruntime variant served by two worker threads: its intra-op threads split between
the workers (serve's rule, serve/worker_threads.py) against two threads each (the session's
default on 2 cores, set here with model_threads), side by side in one run.

Each arm is `infertune serve VARIANT --workers 2 --max-batch-size 8 --max-wait-ms 0
--timeout-ms 100` in its own process, one at a time, driven up a ladder of open-loop Poisson
rates of short sentences (serve_goodput.py's load: every request a new text), in ABBA order
(split, two each, two each, split) so a drift of the machine lands on both. Prints every
step's p50, p99 and errors, and per arm and visit the highest rate with p99 <= --slo-ms and
< 1% errors.

    .venv/bin/python benchmarks/worker_threads.py runs/demo/variants/ort_int8_dynamic_per_channel
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serve_goodput as sg  # noqa: E402  (a sibling script, not a package)


def ladder(variant: Path, extra: list[str], rates: list[float], args: argparse.Namespace,
           label: str) -> float:
    port = sg.free_port()
    cmd = [sys.executable, "-c", "from infertune.cli import entry; entry()", "serve",
           str(variant), "--port", str(port), "--workers", "2", "--max-batch-size", "8",
           "--max-wait-ms", "0", "--timeout-ms", f"{args.slo_ms:g}", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    best, fails = 0.0, 0
    try:
        sg.wait_ready(port, proc)
        for i, rate in enumerate(rates):
            row = sg.summarise_step(rate, sg.slice_records(port, rate, args.step_s, seed=i))
            ok = sg.passes(row, args.slo_ms)
            print(f"{label:<22} {rate:6.0f} rps  p50={row['p50_ms']:7.1f} ms  "
                  f"p99={row['p99_ms']:7.1f} ms  errors={row['error_pct']:4.1f}%  "
                  f"client-lag p99={row['lag_p99_ms']:.1f} ms  {'pass' if ok else 'FAIL'}",
                  flush=True)
            best = max(best, rate) if ok else best
            fails = 0 if ok else fails + 1
            if fails >= 2:
                break
    finally:
        sg.stop(proc)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variant", type=Path, help="an onnxruntime variant folder")
    parser.add_argument("--rates", default="200,250,300,350,400,450,500,550")
    parser.add_argument("--step-s", type=float, default=6.0)
    parser.add_argument("--slo-ms", type=float, default=100.0)
    args = parser.parse_args()
    if not (args.variant / "manifest.json").is_file():
        raise SystemExit(f"{args.variant}: not a variant folder (no manifest.json); run "
                         "`make demo` and pass runs/demo/variants/<id>")
    rates = [float(r) for r in args.rates.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        two_each = Path(tmp) / "two_each.yaml"
        two_each.write_text("model_threads: 2\n")
        arms = {"split (1 per worker)": [], "two each": ["--config", str(two_each)]}
        order = list(arms) + list(arms)[::-1]
        found: dict[str, list[float]] = {k: [] for k in arms}
        for label in order:
            found[label].append(ladder(args.variant, arms[label], rates, args, label))
    for label, values in found.items():
        shown = ", ".join(f"{v:.0f}" for v in values)
        print(f"goodput at p99 <= {args.slo_ms:g} ms, {label}: {shown} req/s (ABBA visits; the "
              f"ladder tops at {rates[-1]:.0f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
