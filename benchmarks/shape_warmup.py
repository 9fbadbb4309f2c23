"""The first batch at each batch size after serve's warm-up, with and without the shape warm-up.

serve warms every length bucket at batch sizes 1 and max (serve/warmup.py); for a runtime in
``EVERY_SIZE_RUNTIMES`` it also runs the sizes in between (``shape_batches``). This script
shows why, side by side in one run: each arm is a fresh process that loads VARIANT sized as
served (``--workers`` workers), runs serve's warm-up (arm "sizes 1 and max") or that and the
shape warm-up (arm "every size"), then times the first and the second call of every batch
size between 1 and max at four lengths. Prints each call pair and per arm the total of the
first calls over the second calls; the arms alternate A B B A so a drift of the machine lands
on both.

    .venv/bin/python benchmarks/shape_warmup.py runs/demo/variants/openvino_int8 [--max-batch 8]

The "every size" arm runs the extra sizes whatever the runtime, so an onnxruntime variant
shows whether it needs them too.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

LENGTHS = (12, 30, 60, 120)  # words, about as many tokens: the four shortest length buckets


def arm(variant: str, max_batch: int, workers: int, every_size: bool) -> dict[str, object]:
    """In this (fresh) process: load, warm as serve does, time first and second calls."""
    from infertune.config import ServePolicy
    from infertune.models.variant import load_variant
    from infertune.serve.warmup import _stretched, run_warmup, warm_shapes, warmup_batches
    from infertune.serve.worker_threads import fit_to_workers

    adapter = load_variant(variant)
    adapter, _ = fit_to_workers(adapter, ServePolicy(workers=workers, max_batch_size=max_batch),
                                workers)
    run_warmup(adapter, warmup_batches(adapter, max_batch))
    base = adapter.sample_inputs(1)[0]
    if every_size:  # shape_batches for any runtime, so onnxruntime can be compared too
        items = [batch[0] for batch in warmup_batches(adapter, 1)]
        warm_shapes(adapter, [[item] * n for item in items for n in range(2, max_batch)])

    def call(batch: list[object]) -> float:
        start = time.perf_counter()
        adapter.postprocess(adapter.forward(feeds := adapter.preprocess(batch)), feeds)
        return (time.perf_counter() - start) * 1000

    rows = []
    for words in LENGTHS:
        item = _stretched(base, words)
        for n in range(2, max_batch):
            rows.append((words, n, call([item] * n), call([item] * n)))
    return {"runtime": adapter.info.runtime, "rows": rows}


def run_arm(variant: str, max_batch: int, workers: int, every_size: bool) -> dict[str, object]:
    code = (f"import json, sys; sys.path.insert(0, {sys.path[0]!r}); import shape_warmup as s; "
            f"print(json.dumps(s.arm({variant!r}, {max_batch}, {workers}, {every_size})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("variant", help="a built variant folder (runs/NAME/variants/ID)")
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    if args.max_batch < 3:
        raise SystemExit("--max-batch: needs 3 or more, so there is a size between 1 and max")
    totals: dict[str, list[float]] = {}
    for every_size in (False, True, True, False):
        label = "every size" if every_size else "sizes 1 and max"
        result = run_arm(args.variant, args.max_batch, args.workers, every_size)
        rows = result["rows"]
        assert isinstance(rows, list)
        first, second = sum(r[2] for r in rows), sum(r[3] for r in rows)
        totals.setdefault(label, []).append(first / second)
        print(f"{label} ({result['runtime']}): first/second call ms, per words x batch: "
              + "  ".join(f"{w}x{n}: {a:.1f}/{b:.1f}" for w, n, a, b in rows), flush=True)
        print(f"  first calls {first:.0f} ms, second calls {second:.0f} ms: "
              f"ratio {first / second:.2f}", flush=True)
    for label, ratios in totals.items():
        print(f"{label}: first/second ratio {', '.join(f'{r:.2f}' for r in ratios)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
