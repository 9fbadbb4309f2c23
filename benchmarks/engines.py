"""Every engine x precision infertune can build for a model, at batch 1 and batch 16, on the
machine at hand: p50/p95 per call, texts/s, and agreement with fp32 (mean cosine of the
embeddings, and top-10 neighbour agreement: the share of each text's 10 nearest neighbours
among the held-out texts that stay the same, what a semantic-search user sees change).

Each variant is built with infertune's own passes (``build_variants``, the CPU described as
detected), then timed in a process of its own (measure/arm_process.py: a child that loads the
variant and times ``predict``), one variant at a time, in two rounds in opposite order so a
drift of the machine lands on both ends. Agreement is computed in this process afterwards, one
variant loaded at a time. Figures are this machine's only; ratios taken side by side here.

    .venv/bin/python benchmarks/engines.py            # the built-in minilm, full run
    .venv/bin/python benchmarks/engines.py --quick    # a few calls each: checks it runs
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from infertune.data import default_heldout
from infertune.hardware import detect
from infertune.libraries import quiet_libraries
from infertune.measure.arm_process import ArmFailed, ArmProcess
from infertune.models import load
from infertune.optimize import PassContext, build_variants
from infertune.optimize.passes import REGISTRY
from infertune.optimize.passes.variant_files import predict_rows

# one pass per engine x precision (the others are settings of these: threads, trimming)
ENGINE_PASSES = ("torch_fp32", "torch_bf16", "torch_int8_dynamic", "torch_fp16",
                 "ort_fp32", "ort_fused", "ort_int8_dynamic_per_channel",
                 "ort_cuda_fp16", "ort_tensorrt_fp16",
                 "openvino_fp32", "openvino_bf16", "openvino_int8")
REFERENCE = "torch_fp32"
BATCHES = (1, 16)
NEIGHBOURS = 10
QUALITY_TEXTS = 500  # of the bundled 606; the rest calibrate


@dataclass
class Row:
    variant: str
    batch: int
    calls: int
    p50_ms: float
    p95_ms: float
    texts_per_s: float
    mean_cosine: float | None = None
    top10_agreement: float | None = None


def build(model: str, calibration: list[str], out: Path, quick: bool) -> dict[str, Path]:
    """Build every engine pass that applies here; print the ones skipped and why."""
    baseline = load(model)
    ctx = PassContext(baseline, detect(), out, calibration, n_samples=16 if quick else 32,
                      max_calibration=32 if quick else 128)
    names = [n for n in ENGINE_PASSES if n in REGISTRY]
    built: dict[str, Path] = {}
    for result in build_variants(baseline, ctx, names=names):
        if result.built and result.pass_name in names:
            built[result.pass_name] = Path(str(result.path))
        elif not result.built:
            print(f"  skipped {result.pass_name}: {result.reason}", flush=True)
    return built


def time_variant(path: Path, batch: int, calls: int, texts: list[str], seed: int,
                 warmup: int = 3) -> list[float]:
    """Seconds per call, timed in the variant's own process (after a short warm-up)."""
    rng = random.Random(seed)
    with ArmProcess(str(path)) as arm:
        for _ in range(warmup):
            arm(rng.sample(texts, batch))
        return [arm(rng.sample(texts, batch)) for _ in range(calls)]


def measure(built: dict[str, Path], texts: list[str], calls: dict[int, int], warmup: int
            ) -> dict[tuple[str, int], list[float]]:
    """Two rounds, the second in the opposite order; each (variant, batch) gets the same
    texts in both rounds' seeds."""
    seconds: dict[tuple[str, int], list[float]] = {}
    order = list(built)
    for round_no, names in enumerate((order, order[::-1])):
        for name in names:
            for batch in BATCHES:
                try:
                    got = time_variant(built[name], batch, calls[batch], texts,
                                       seed=1000 * round_no + batch, warmup=warmup)
                except ArmFailed as exc:
                    print(f"  {name} batch {batch}: {exc}", flush=True)
                    continue
                seconds.setdefault((name, batch), []).extend(got)
                print(f"  round {round_no + 1} {name:<30} batch {batch:>2}: "
                      f"p50 {1000 * float(np.median(got)):7.2f} ms", flush=True)
    return seconds


def neighbour_agreement(reference: np.ndarray, other: np.ndarray, k: int = NEIGHBOURS) -> float:
    """Mean share of each row's k nearest neighbours (cosine, itself left out) that the two
    embeddings share."""
    def top(emb: np.ndarray) -> np.ndarray:
        unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
        sim = unit @ unit.T
        np.fill_diagonal(sim, -np.inf)
        return np.argsort(-sim, axis=1)[:, :k]

    a, b = top(reference), top(other)
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(a, b, strict=True)]))


def agreement(built: dict[str, Path], texts: list[str]) -> dict[str, tuple[float, float]]:
    outputs = {}
    for name, path in built.items():
        outputs[name] = predict_rows(load(path), texts)  # one variant in memory at a time
    ref = outputs[REFERENCE]
    found = {}
    for name, out in outputs.items():
        cos = (ref * out).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(out, axis=1))
        found[name] = (float(cos.mean()), neighbour_agreement(ref, out))
    return found


def rows(seconds: dict[tuple[str, int], list[float]],
         quality: dict[str, tuple[float, float]]) -> list[Row]:
    out = []
    for (name, batch), values in seconds.items():
        ms = 1000 * np.asarray(values)
        cos, top = quality.get(name, (None, None))
        out.append(Row(name, batch, len(values), float(np.percentile(ms, 50)),
                       float(np.percentile(ms, 95)), batch * len(values) / float(np.sum(values)),
                       cos, top))
    return sorted(out, key=lambda r: (r.batch, -r.texts_per_s))


def print_table(table: list[Row], cpu: str) -> None:
    print(f"\nmeasured on {cpu} (each variant in its own process, two rounds in opposite "
          "order; agreement against torch_fp32)")
    print(f"{'variant':<30} {'batch':>5} {'calls':>5} {'p50 ms':>8} {'p95 ms':>8} "
          f"{'texts/s':>8} {'cosine':>7} {'top-10':>7}")
    for r in table:
        cos = f"{r.mean_cosine:.4f}" if r.mean_cosine is not None else "-"
        top = f"{r.top10_agreement:.3f}" if r.top10_agreement is not None else "-"
        print(f"{r.variant:<30} {r.batch:>5} {r.calls:>5} {r.p50_ms:>8.2f} {r.p95_ms:>8.2f} "
              f"{r.texts_per_s:>8.1f} {cos:>7} {top:>7}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--quick", action="store_true",
                        help="a few calls and texts each: checks the script runs, times nothing")
    parser.add_argument("--calls", type=int, default=300, help="batch-1 calls per round")
    parser.add_argument("--out", type=Path, help="variants folder (default: a temporary one)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    quiet_libraries()
    texts = [str(x) for x in default_heldout().inputs]
    calls = {1: 4, 16: 2} if args.quick else {1: args.calls, 16: max(10, args.calls // 8)}
    # agreement is judged on texts the INT8 passes did not calibrate on
    quality_texts, calibration = texts[:QUALITY_TEXTS], texts[QUALITY_TEXTS:]
    if args.quick:
        quality_texts, calibration = quality_texts[:48], calibration[:32]
    out = args.out or Path(tempfile.mkdtemp(prefix="engines-"))
    started = time.perf_counter()
    try:
        print(f"building variants of {args.model} into {out}", flush=True)
        built = build(args.model, calibration, out, args.quick)
        if REFERENCE not in built:
            print(f"{REFERENCE} did not build; nothing to compare against")
            return 1
        # --quick times the 64 shortest texts (the bundled ones run to ~250 tokens)
        timed = sorted(texts, key=len)[:64] if args.quick else texts
        seconds = measure(built, timed, calls, warmup=1 if args.quick else 3)
        table = rows(seconds, agreement(built, quality_texts))
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)
    print_table(table, detect().cpu_model)
    print(f"({time.perf_counter() - started:.0f} s in all)")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in table], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
