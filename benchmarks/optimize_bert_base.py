"""Does `infertune optimize` with the default budget, on a BERT-base-sized encoder (12 layers,
hidden 768, 110M parameters, random weights built from a transformers BertConfig), measure at
least one INT8 candidate against the baseline and run the serving sweep, or else does the
report state the budget that would let it? (issue 14, "A budget spent by expected value")

    python benchmarks/optimize_bert_base.py                 # build the model, run optimize
    python benchmarks/optimize_bert_base.py --run runs/X    # judge a run made earlier
    python benchmarks/optimize_bert_base.py --budget 8m     # another budget (default: none,
                                                            # i.e. optimize's own default)

No model is downloaded: the encoder has random weights and a WordPiece vocabulary made of the
bundled held-out set's own words (so token counts are realistic) padded to BERT-base's 30,522
entries. The held-out data are minilm's bundled sentences. It prints, at the end, the verdict:
"target met" when an INT8 variant was timed against the baseline and the sweep ran, or when
the report states the budget that would let an INT8 variant be measured; "target not met"
otherwise.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml
from transformers import BertConfig, BertModel, BertTokenizerFast

from infertune.cli import main as cli_main
from infertune.data import default_heldout
from infertune.optimize.findings import as_v2

VOCAB_SIZE = 30522  # BERT-base's
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def build_bert_base(folder: Path) -> Path:
    """A BERT-base-sized encoder (random weights, seed 0) and its tokenizer, saved as a Hugging
    Face folder that `infertune optimize` loads like any local model."""
    folder.mkdir(parents=True, exist_ok=True)
    words: list[str] = []
    seen: set[str] = set(SPECIAL)
    for text in default_heldout().inputs:
        for word in re.findall(r"[a-z]+|\d+|[^\sa-z\d]", str(text).lower()):
            if word not in seen:
                seen.add(word)
                words.append(word)
    filler = [f"##x{i}" for i in range(VOCAB_SIZE - len(SPECIAL) - len(words))]
    vocab = (SPECIAL + words + filler)[:VOCAB_SIZE]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt"),
                      do_lower_case=True).save_pretrained(str(folder))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB_SIZE, hidden_size=768, num_hidden_layers=12,
                        num_attention_heads=12, intermediate_size=3072,
                        max_position_embeddings=512)
    model = BertModel(config).eval()
    model.save_pretrained(str(folder), safe_serialization=True)
    return folder


def write_inputs(root: Path) -> tuple[Path, Path]:
    """(scenario.yaml, data.jsonl) for the encoder: minilm's held-out sentences, an embedding
    task with the mean-cosine floor of 0.99, bursty traffic at 5 req/s mean, 15 at peak."""
    data = root / "data.jsonl"
    data.write_text("".join(json.dumps({"input": t}) + "\n" for t in default_heldout().inputs))
    scenario = {
        "model": {"name": "bert-base (random weights)", "family": "transformer-encoder",
                  "task": "embedding", "framework": "pytorch"},
        "deployment": {"target": "container", "hardware": {"cpu": "2 vCPU"},
                       "cost_per_hour_usd": 0.10},
        "inputs": {"typical": {"batch_size": 1, "seq_len": 64}},
        "slo": {"p95_ms": 150, "p99_ms": 300},
        "traffic": {"pattern": "bursty", "mean_rps": 5, "peak_rps": 15},
        "constraints": {"quality_floor": {"metric": "mean_cosine", "min": 0.99}},
    }
    path = root / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    return path, data


def judge(run: Path) -> bool:
    """Print what the run measured and the verdict; True when the target is met."""
    record = as_v2(json.loads((run / "run.json").read_text()))
    report = json.loads((run / "report.json").read_text())
    int8 = [c for c in record["screen"]["candidates"]
            if "int8" in c["variant_id"] and (c.get("quick") or c.get("proper"))]
    for c in int8:
        t = c.get("proper") or c["quick"]
        print(f"INT8 measured: {c['variant_id']} ({t['kind']}, {t['samples']} samples a side): "
              f"p95 {t['p95_ms']:.1f} ms against the baseline's {t['base_p95_ms']:.1f} ms "
              f"({1 / t['ratio_p95']:.2f}x), quality {c['quality_verdict']}")
    swept = record["sweep"].get("sweep") is not None
    print("stage seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in
                                          record["log"]["stage_seconds"].items()))
    print(f"serving sweep ran: {'yes' if swept else 'no'}")
    notes = report.get("notes", [])
    stated = [n for n in notes if n.startswith("INT8 on this model")]
    for note in stated + [n for n in notes if "complete search" in n]:
        print(f"report states: {note}")
    print(f"recommendation: {report['recommendation'].get('variant_id')}")
    if int8 and swept:
        print("target met: an INT8 candidate was measured against the baseline and the "
              "sweep ran")
        return True
    if stated:
        print("target met: no INT8 candidate was measured, and the report states the budget "
              "that would let one be")
        return True
    print("target not met: no INT8 candidate measured (or no sweep) and no budget for it "
          "stated")
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", help="judge this run directory instead of making one")
    parser.add_argument("--budget", help="optimize --budget (default: optimize's default)")
    parser.add_argument("--keep", help="folder for the model and the run (default: a temp dir)")
    args = parser.parse_args()
    if args.run:
        return 0 if judge(Path(args.run)) else 1
    root = Path(args.keep or tempfile.mkdtemp(prefix="bert-base-"))
    started = time.monotonic()
    model = build_bert_base(root / "model")
    n_params = sum(p.numel() for p in BertModel.from_pretrained(str(model)).parameters())
    print(f"built {model}: {n_params / 1e6:.1f}M parameters in "
          f"{time.monotonic() - started:.0f} s", flush=True)
    scenario, data = write_inputs(root)
    run = root / "run"
    budget = ["--budget", args.budget] if args.budget else []
    started = time.monotonic()
    rc = cli_main(["optimize", str(model), "--scenario", str(scenario), "--data", str(data),
                   "--out", str(run), "--overwrite", *budget])
    print(f"optimize exited {rc} after {time.monotonic() - started:.0f} s wall "
          "(the machine is shared: wall time includes other engineers' load)", flush=True)
    if rc != 0:
        print("target not met: optimize failed")
        return 1
    return 0 if judge(run) else 1


if __name__ == "__main__":
    sys.exit(main())
