"""Where a canary's latency gate reads its samples: one `infertune serve --registry` process
with stable A and canary C (the same MLP, weights disturbed by 0.2% of their spread: a
faithful rebuild), open-loop at 20 req/s; at canary weights 0, 20, 50 and 100% for 40 s each,
prints per release how many model answers its latency histogram counted and the share slower
than each bucket bound from 1.5 to 4 ms.

    .venv/bin/python benchmarks/canary_arm_latency.py [--rate 20] [--seconds 40]

What it showed (2-core AMD EPYC, before the router kept its replays out of the stable's
histogram): at 100% every stable sample was a replay of a canary answer, and 31% of them were
slower than 2.5 ms against 4% of the stable's own answers at 0%; and the stable's p90 fell
between the 2 and 2.5 ms bounds with 89% of its answers above 2 ms. Uses the rollout tests'
helpers (tests/helpers) for the tiny model and the server process.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))
from onnx_graphs import WIDTH  # noqa: E402
from release_server import release_server  # noqa: E402
from rollout_load import OpenLoop  # noqa: E402
from rollout_variants import mlp_run  # noqa: E402

from infertune.rollout.observe import parse_exposition  # noqa: E402
from infertune.rollout.release_registry import Registry  # noqa: E402

KEY = {"X-API-Key": "k3y"}


def _histograms(url: str) -> dict[str, dict[float, float]]:
    snap = parse_exposition(httpx.get(url + "/metrics", headers=KEY).text)
    return {r: dict(snap.of(r).buckets) for r in ("A", "C")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=40.0)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    reg = Registry(tmp / "registry")
    reg.add(mlp_run(tmp / "run-a"), "A")
    reg.add(mlp_run(tmp / "run-c", noise=0.002), "C")
    rng = np.random.default_rng(1)
    count = int(args.rate * (4 * (args.seconds + 3) + 20)) + 100
    bodies = [{"inputs": rng.standard_normal((1, WIDTH)).round(3).tolist()}
              for _ in range(count)]  # all distinct: no cache hits
    os.environ["K"] = "k3y"
    with release_server(reg.root, "A", canary="C", api_key_env="K", env={"K": "k3y"}) as url, \
            OpenLoop(url, args.rate, bodies, KEY), httpx.Client(base_url=url,
                                                                headers=KEY) as client:
        time.sleep(15)  # warm both releases' first calls before any window
        for weight in (0, 20, 50, 100):
            client.post("/admin/routing", json={"action": "weight", "weight": weight,
                                                "reason": "arm latency"}).raise_for_status()
            time.sleep(3)
            before = _histograms(url)
            time.sleep(args.seconds)
            after = _histograms(url)
            for release in ("A", "C"):
                h = {le: v - before[release].get(le, 0.0) for le, v in after[release].items()}
                total = h.get(math.inf, 0.0)
                if not total:
                    print(f"weight {weight:>3}% {release}: no model answers")
                    continue
                shares = ", ".join(f">{le * 1000:g} ms {1 - v / total:.3f}"
                                   for le, v in sorted(h.items()) if 0.0015 <= le <= 0.004)
                print(f"weight {weight:>3}% {release}: {int(total)} answers; {shares}",
                      flush=True)


if __name__ == "__main__":
    main()
