"""The problem statement's example on this CPU: how much faster at p95 is the variant `infertune
optimize` recommends for a cross-encoder reranker than eager PyTorch fp32, and what NDCG@10
does each give? Re-measures both side by side (randomised interleaved blocks, one process, the
bundled (query, passage) pairs, one pair per request) and prints the p95 ratio with its
bootstrap 95% CI, then NDCG@10 of each against the relevance labels, per query with its CI.

No trained reranker can be downloaded here, so the model is MiniLM-L6-sized: the embedded
all-MiniLM-L6-v2 encoder with a seeded random one-logit score head, saved by the installed
transformers as a user's cross-encoder folder would be. Its timings are a real-size model's;
its NDCG@10 shows how well a variant keeps the baseline's ranking, not a trained reranker's
quality.

    python benchmarks/optimize_reranker.py                  # runs a quick optimize first
    python benchmarks/optimize_reranker.py --run runs/NAME  # the variant a run chose
    python benchmarks/optimize_reranker.py --full           # a default-budget optimize run
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "examples" / "scenarios" / "reranker-cpu.yaml"


def make_cross_encoder(folder: Path, seed: int) -> Path:
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    from infertune.models.loaders import minilm_path

    torch.manual_seed(seed)
    source = minilm_path()
    model = BertForSequenceClassification.from_pretrained(str(source), num_labels=1).eval()
    model.save_pretrained(str(folder), safe_serialization=True)
    AutoTokenizer.from_pretrained(str(source)).save_pretrained(str(folder))
    return folder


def run_folder(args: argparse.Namespace, model: Path) -> Path:
    from infertune.cli import main

    run = model.parent / "run"
    budget = args.budget or ("5.5m" if args.full else "2m")
    quick = [] if args.full else ["--quick"]
    print(f"running `infertune optimize {model} {' '.join(quick)} --budget {budget}` "
          f"into {run}", flush=True)
    rc = main(["optimize", str(model), "--scenario", str(SCENARIO), "--data",
               str(ROOT / "src" / "infertune" / "data" / "reranking_heldout.jsonl"), *quick,
               "--budget", budget, "--out", str(run)])
    if rc != 0:
        sys.exit(f"optimize failed with exit code {rc}")
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", help="a run directory of a cross-encoder, holding report.json")
    parser.add_argument("--budget", default=None, help="budget of the optimize run it starts")
    parser.add_argument("--full", action="store_true", help="a full (not --quick) optimize run")
    parser.add_argument("--seconds", type=float, default=60.0, help="timing budget")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from infertune import hardware
    from infertune.cli._common import quiet_libraries
    from infertune.data import reranking_heldout
    from infertune.measure.compare import run_interleaved
    from infertune.models import load
    from infertune.optimize.search.timing import batch1_requests
    from infertune.quality import evaluate_outputs, run_outputs

    quiet_libraries()
    hw = hardware.detect()
    print(f"machine:  {hw.cpu_model}, {hw.effective_cores} effective cores")
    model = None if args.run else make_cross_encoder(
        Path(tempfile.mkdtemp(prefix="reranker-")) / "model", args.seed)
    run = run_folder(args, model) if model is not None else Path(args.run)
    report = json.loads((run / "report.json").read_text())
    vid = report["recommendation"]["variant_id"]
    if not vid:
        sys.exit(f"{run}/report.json recommends no variant")
    # the run's own copy of the baseline: the user's checkpoint run eagerly in fp32
    baseline = load(run / "variants" / "torch_fp32")
    variant = load(run / "variants" / vid)
    print(f"baseline: torch_fp32 of {run} ({baseline.info.runtime} {baseline.info.precision}, "
          "eager)")
    print(f"variant:  {vid} ({variant.info.runtime} {variant.info.precision})")
    data = reranking_heldout()
    print(f"inputs:   {len(data)} (query, passage) pairs in {len(set(data.groups or []))} "
          "queries, one pair per request (batch 1)")

    ref = run_outputs(baseline, data.inputs, batch_size=16)
    for name, outputs in (("eager fp32", ref), (vid, run_outputs(variant, data.inputs, 16))):
        quality = evaluate_outputs(ref, outputs, data.labels, "ndcg@10 drop<=0.01", "reranking",
                                   ["ndcg@10", "rank_agreement"], seed=args.seed,
                                   groups=data.groups)
        ndcg, agree = quality.metric("ndcg@10"), quality.metric("rank_agreement")
        print(f"  {name:<28} NDCG@10 {ndcg.value:.4f} [{ndcg.ci_low:.4f}, {ndcg.ci_high:.4f}]"
              f"  rank agreement with eager {agree.value:.3f}  (floor verdict vs eager: "
              f"{quality.verdict})")

    requests = batch1_requests(list(data.inputs), 600, seed=args.seed)
    result = run_interleaved(baseline.predict, variant.predict, requests,
                             budget_s=args.seconds, block_size=20, min_trials=60, warmup=10,
                             target_block_s=5.0, seed=args.seed,
                             names=("torch eager fp32", "variant"))
    a, b, p95 = result.a_summary, result.b_summary, result.stats.p95
    print(f"latency:  {result.trials} interleaved trials, {result.stats.n_a} requests per side "
          f"in {result.seconds:.0f} s")
    print(f"  eager    p50 {a.p50:.2f} ms  p95 {a.p95:.2f} ms  p99 {a.p99:.2f} ms")
    print(f"  variant  p50 {b.p50:.2f} ms  p95 {b.p95:.2f} ms  p99 {b.p99:.2f} ms")
    print(f"p95 speed-up of {vid} over eager: {1 / p95.ratio:.2f}x "
          f"(95% CI {1 / p95.high:.2f}x to {1 / p95.low:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
