"""Does leaving the residual LayerNorms unfused (Add + LayerNormalization instead of
onnxruntime's SkipLayerNormalization) speed up minilm's INT8 variant on this machine?

Builds ort_int8_dynamic_per_channel twice from one ONNX export, once with SkipLayerNormalization
fused and once without (SkipLayerNormFusion also off at load), checks both against the fp32
embeddings, then times them side by side (randomised interleaved blocks, one process, batch 1,
the bundled held-out sentences) and prints the p50 and p95 ratios with bootstrap 95% CIs. The
ort_fused pass makes this choice itself from a micro-benchmark; this script checks it on the
whole model.

    python benchmarks/ort_skip_layernorm.py              # about 2 minutes
    python benchmarks/ort_skip_layernorm.py --seconds 60
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from functools import partial
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40.0, help="timing budget")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import numpy as np

    from infertune.cli._common import quiet_libraries
    from infertune.data import default_heldout
    from infertune.hardware import detect
    from infertune.measure.compare import run_interleaved
    from infertune.models import load
    from infertune.optimize import PassContext, build_variants
    from infertune.optimize.passes import REGISTRY
    from infertune.optimize.passes.ort_fusion import OrtFusionPass, time_skip_layernorm
    from infertune.optimize.search.timing import batch1_requests

    quiet_libraries()
    baseline = load("minilm")
    texts = list(default_heldout().inputs)
    hardware = detect(with_gpus=False)
    probe = time_skip_layernorm(384)
    print(f"micro-benchmark (128 tokens x 384): SkipLayerNormalization {probe.fused_us:.1f} us, "
          f"Add + LayerNormalization {probe.unfused_us:.1f} us; the pass would "
          f"{'fuse' if probe.fuse else 'leave them unfused'}")
    variants = {}
    with tempfile.TemporaryDirectory(prefix="skip-ln-") as tmp:
        for mode in ("fused", "unfused"):
            registry = REGISTRY | {"ort_fused": partial(OrtFusionPass, skip_layernorm=mode)}
            ctx = PassContext(baseline, hardware, Path(tmp) / mode, texts[:128])
            built = build_variants(baseline, ctx, names=["ort_int8_dynamic_per_channel"],
                                   registry=registry)[-1]
            if not built.built:
                sys.exit(f"building the {mode} variant failed: {built.reason}")
            variants[mode] = load(built.path)
            print(f"{mode:8s} {built.manifest.op_counts}")
        a, b = variants["fused"], variants["unfused"]
        ref = np.stack(baseline.predict(texts[:200]))
        for mode, variant in variants.items():
            cosine = float((np.stack(variant.predict(texts[:200])) * ref).sum(axis=1).mean())
            print(f"{mode:8s} mean cosine to torch fp32 on 200 sentences: {cosine:.5f}")
        requests = batch1_requests(texts, 600, seed=args.seed)
        # long blocks (about 0.25 s) with their first quarter untimed: two onnxruntime
        # sessions in one process slow each other for many calls after each switch, as the
        # idle one's intra-op threads keep spinning (blocks of 20: p95 4.0 ms alone, 6.9 ms
        # beside a spinning session, 4.0 beside one with spinning off), which short blocks
        # would bill to both sides
        result = run_interleaved(a.predict, b.predict, requests, budget_s=args.seconds,
                                 block_size=200, min_trials=40, warmup=10, target_block_s=0.25,
                                 seed=args.seed, names=("SkipLayerNorm fused", "unfused"))
    sa, sb, stats = result.a_summary, result.b_summary, result.stats
    print(f"latency:  {result.trials} interleaved trials, {stats.n_a} requests per side in "
          f"{result.seconds:.0f} s")
    print(f"  fused    p50 {sa.p50:.3f} ms  p95 {sa.p95:.3f} ms")
    print(f"  unfused  p50 {sb.p50:.3f} ms  p95 {sb.p95:.3f} ms")
    for name, r in (("p50", stats.p50), ("p95", stats.p95)):
        print(f"{name} speedup of unfused: {1 / r.ratio:.2f}x (95% CI {1 / r.high:.2f}x to "
              f"{1 / r.low:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
