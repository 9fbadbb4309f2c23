"""Does the utilisation sampler slow the model down? Measured, not assumed.

A = minilm single-request predict with no sampler; B = the same while the UtilisationSampler
runs (at the profile's 0.2 s interval and at an aggressive 0.01 s). Randomised interleaved
blocks (measure.compare.run_interleaved); the sampler is started before each B block and
stopped before each A block, untimed (``before_block``), so each side runs in its own
condition and the switch is billed to neither. Prints the p50 and p95
ratio B/A with the bootstrap 95% CI and the verdict.

    .venv/bin/python benchmarks/sampler_overhead.py [--budget 30]
"""

from __future__ import annotations

import argparse
from typing import Any

from infertune.cli._common import quiet_libraries
from infertune.data import default_heldout
from infertune.measure.compare import run_interleaved
from infertune.measure.utilisation import UtilisationSampler
from infertune.models import load


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=float, default=30.0)
    args = parser.parse_args()
    quiet_libraries()
    adapter = load("minilm")
    requests = [[x] for x in default_heldout().inputs[:200]]
    for interval in (0.2, 0.01):
        holder: dict[str, Any] = {"sampler": None}

        def switch(side: str, h: dict[str, Any] = holder, iv: float = interval) -> None:
            # untimed, before each block: B blocks run with the sampler, A blocks without
            if side == "B" and h["sampler"] is None:
                h["sampler"] = UtilisationSampler(interval_s=iv).start()
            elif side == "A" and h["sampler"] is not None:
                h["sampler"].stop()
                h["sampler"] = None

        result = run_interleaved(adapter.predict, adapter.predict, requests,
                                 budget_s=args.budget, block_size=20, before_block=switch,
                                 names=("no sampler", f"sampler every {interval} s"))
        if holder["sampler"] is not None:
            holder["sampler"].stop()
        stats = result.stats
        print(f"sampler every {interval} s: {stats.n_a}+{stats.n_b} requests, "
              f"{result.trials} trials of {result.block_size}, {result.seconds:.1f} s, "
              f"stopped: {result.stopped}")
        for est in (stats.p50, stats.p95):
            print(f"  p{est.percentile:g} ratio B/A {est.ratio:.3f} "
                  f"(95% CI {est.low:.3f}-{est.high:.3f}) -> {est.verdict}")


if __name__ == "__main__":
    main()
