"""Is the variant `infertune optimize` chose for minilm at least 4x faster at p95 than eager
PyTorch fp32 at batch 1, while keeping mean cosine >= 0.99 and top-10 neighbour agreement
>= 0.90? Re-measures both side by side (randomised interleaved blocks, one process, the same
real sentences of varied length from the bundled held-out set) and prints the ratio with its
bootstrap 95% CI.

    python benchmarks/optimize_minilm.py --run runs/NAME      # the variant a run chose
    python benchmarks/optimize_minilm.py                      # runs a quick optimize first
    python benchmarks/optimize_minilm.py --full               # ... a default-budget one
    python benchmarks/optimize_minilm.py --variant runs/NAME/variants/ID
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

SCENARIO = Path(__file__).resolve().parent.parent / "examples" / "scenarios" / "minilm-cpu.yaml"
TARGET_SPEEDUP = 4.0
MIN_COSINE = 0.99
MIN_KNN = 0.90


def chosen_variant(args: argparse.Namespace) -> Path:
    if args.variant:
        return Path(args.variant)
    run = Path(args.run) if args.run else None
    if run is None:
        from infertune.cli import main

        run = Path(tempfile.mkdtemp(prefix="optimize-minilm-")) / "run"
        budget = args.budget or ("5.5m" if args.full else "2m")
        quick = [] if args.full else ["--quick"]
        print(f"no --run given: running `infertune optimize minilm {' '.join(quick)} --budget "
              f"{budget}` into {run}", flush=True)
        rc = main(["optimize", "minilm", "--scenario", str(SCENARIO), *quick, "--budget",
                   budget, "--out", str(run)])
        if rc != 0:
            sys.exit(f"optimize failed with exit code {rc}")
    report = json.loads((run / "report.json").read_text())
    vid = report["recommendation"]["variant_id"]
    if not vid:
        sys.exit(f"{run}/report.json recommends no variant")
    return run / "variants" / vid


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", help="a run directory holding report.json")
    parser.add_argument("--variant", help="a variant folder (overrides --run)")
    parser.add_argument("--budget", default=None, help="budget of the optimize run it starts")
    parser.add_argument("--full", action="store_true",
                        help="without --run: a full (not --quick) optimize run")
    parser.add_argument("--seconds", type=float, default=60.0, help="timing budget")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from infertune.cli._common import quiet_libraries
    from infertune.data import default_heldout
    from infertune.measure.compare import run_interleaved
    from infertune.models import load
    from infertune.optimize.search.timing import batch1_requests
    from infertune.quality import evaluate_outputs, run_outputs

    quiet_libraries()
    folder = chosen_variant(args)
    baseline, variant = load("minilm"), load(folder)
    print(f"baseline: minilm, {baseline.info.runtime} {baseline.info.precision} (eager)")
    print(f"variant:  {folder} ({variant.info.runtime} {variant.info.precision})")
    data = default_heldout()
    texts = list(data.inputs)
    lengths = baseline.token_lengths(texts)
    print(f"inputs:   {len(texts)} held-out sentences, {min(lengths)}-{max(lengths)} tokens "
          f"(median {sorted(lengths)[len(lengths) // 2]}), one per request (batch 1)")

    ref = run_outputs(baseline, texts, batch_size=16)
    out = run_outputs(variant, texts, batch_size=16)
    quality = evaluate_outputs(ref, out, None, f"mean_cosine>={MIN_COSINE}", "embedding",
                               ["mean_cosine", "knn_agreement@10"], seed=args.seed)
    cos, knn = quality.metric("mean_cosine"), quality.metric("knn_agreement@10")
    print(f"quality:  mean cosine {cos.value:.4f} [{cos.ci_low:.4f}, {cos.ci_high:.4f}], "
          f"top-10 neighbour agreement {knn.value:.3f} [{knn.ci_low:.3f}, {knn.ci_high:.3f}] "
          f"on {quality.n_examples} sentences; floor verdict: {quality.verdict}")

    requests = batch1_requests(texts, 600, seed=args.seed)
    result = run_interleaved(baseline.predict, variant.predict, requests,
                             budget_s=args.seconds, block_size=20, min_trials=60, warmup=10,
                             target_block_s=5.0,
                             seed=args.seed, names=("torch eager fp32", "variant"))
    a, b, p95 = result.a_summary, result.b_summary, result.stats.p95
    speed, lo, hi = 1 / p95.ratio, 1 / p95.high, 1 / p95.low
    print(f"latency:  {result.trials} interleaved trials, {result.stats.n_a} requests per side "
          f"in {result.seconds:.0f} s")
    print(f"  baseline p50 {a.p50:.2f} ms  p95 {a.p95:.2f} ms  p99 {a.p99:.2f} ms")
    print(f"  variant  p50 {b.p50:.2f} ms  p95 {b.p95:.2f} ms  p99 {b.p99:.2f} ms")
    print(f"p95 speedup: {speed:.2f}x (95% CI {lo:.2f}x to {hi:.2f}x)")
    ok = speed >= TARGET_SPEEDUP and cos.value >= MIN_COSINE and knn.value >= MIN_KNN
    verdict = "MET" if ok else "NOT MET"
    print(f"target (>= {TARGET_SPEEDUP:g}x at p95, mean cosine >= {MIN_COSINE}, "
          f"top-10 agreement >= {MIN_KNN}): {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
