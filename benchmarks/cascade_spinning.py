"""Does a serve cascade of two onnxruntime models answer faster with its sessions' intra-op
spinning off (what `infertune serve --fast-model` now does, serve/cascade.without_spinning)?

Each configuration runs in its own process (so the other configuration's sessions cannot
interfere): warm up, then for each of N held-out sentences the fast model and then the full
model, timed together. Processes alternate in ABBA order, five of each by default; the script
prints each process's p50/p95 and the pooled figures with the ratio.

    python benchmarks/cascade_spinning.py --run runs/demo     # about 1 minute
    python benchmarks/cascade_spinning.py --full VARIANT --fast VARIANT --pairs 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def child(full: str, fast: str, spin: bool, n: int, seed: int) -> None:
    from infertune.cli._common import quiet_libraries
    from infertune.data import default_heldout
    from infertune.models import load
    from infertune.optimize.search.timing import batch1_requests
    from infertune.serve.cascade import without_spinning

    quiet_libraries()
    full_model, fast_model = load(full), load(fast)
    if not spin:
        full_model, fast_model = without_spinning(full_model, fast_model)
    requests = batch1_requests(list(default_heldout().inputs), n, seed=seed)
    for req in requests[:30]:
        fast_model.predict(req)
        full_model.predict(req)
    out = []
    for req in requests:
        t0 = time.perf_counter()
        fast_model.predict(req)
        full_model.predict(req)
        out.append((time.perf_counter() - t0) * 1000.0)
    print(json.dumps(out))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", help="a run folder: its per-channel INT8 variant is the full "
                        "model and its per-tensor one the fast model")
    parser.add_argument("--full", help="the full model (a variant folder or .onnx)")
    parser.add_argument("--fast", help="the fast model")
    parser.add_argument("--pairs", type=int, default=5, help="processes per configuration")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--child", nargs=3, metavar=("SPIN", "N", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    full, fast = args.full, args.fast
    if args.run:
        full = full or str(Path(args.run) / "variants" / "ort_int8_dynamic_per_channel")
        fast = fast or str(Path(args.run) / "variants" / "ort_int8_dynamic_per_tensor")
    if not (full and fast):
        sys.exit("pass --run RUN, or --full and --fast")
    if args.child:
        child(full, fast, args.child[0] == "1", int(args.child[1]), int(args.child[2]))
        return 0

    import numpy as np

    order = (["1", "0", "0", "1"] * args.pairs)[: 2 * args.pairs]
    runs: dict[str, list[list[float]]] = {"1": [], "0": []}
    for i, spin in enumerate(order):
        cmd = [sys.executable, __file__, "--full", full, "--fast", fast,
               "--child", spin, str(args.requests), str(i)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"child failed: {done.stderr.strip().splitlines()[-1:]}")
        latencies = json.loads(done.stdout.strip().splitlines()[-1])
        runs[spin].append(latencies)
        name = "spinning" if spin == "1" else "no spin "
        print(f"process {i + 1:2d} {name}  p50 {np.percentile(latencies, 50):6.2f} ms  "
              f"p95 {np.percentile(latencies, 95):6.2f} ms", flush=True)
    pooled = {k: np.concatenate(v) for k, v in runs.items()}
    for spin, name in (("1", "spinning"), ("0", "no spin ")):
        p50, p95 = np.percentile(pooled[spin], [50, 95])
        print(f"pooled {name}: p50 {p50:.2f} ms  p95 {p95:.2f} ms  "
              f"({len(runs[spin])} processes x {args.requests} requests)")
    ratio95 = np.percentile(pooled["0"], 95) / np.percentile(pooled["1"], 95)
    ratio50 = np.percentile(pooled["0"], 50) / np.percentile(pooled["1"], 50)
    print(f"no spin / spinning: p50 {ratio50:.3f}, p95 {ratio95:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
