"""A tiny run folder, as `infertune optimize` leaves it, built in the test in well under a
second (a real optimize run needs a 45 s budget at least): a variant folder with a verified
manifest (a text model: a 2-input embedding-bag ONNX graph with a real BERT WordPiece
tokenizer; or the tensor MLP of onnx_graphs.py), report.json through the Report schema,
scenario.yaml and hardware.json. The figures in report.json are fixture values labelled as
measured on "test machine"; tests compare the exported files with them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import yaml
from onnx import TensorProto, helper, numpy_helper
from onnx_graphs import make_mlp
from transformers import BertTokenizerFast

from infertune.config import ServePolicy
from infertune.hardware import HardwareInfo
from infertune.models.variant import (
    InputSpec,
    Manifest,
    Preprocessing,
    ThreadSettings,
    manifest_digest,
    sha256_file,
)
from infertune.report.schema import (
    Diagnosis,
    Figure,
    MeasurementPlan,
    Percentiles,
    PolicyRow,
    Problem,
    Recommendation,
    Report,
    Serving,
    VariantRow,
)

WORDS = ("the a is was fast slow model query answer user password reset report revenue grew "
         "costs stayed flat inference matters when users wait for every how do i my").split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
HIDDEN = 8
HW = "test machine"

# the fixture's "measured" policy and figures
POLICY = ServePolicy(max_batch_size=16, max_wait_ms=3.0, workers=2, max_queue=128)
GOODPUT_RPS = 180.0
SERVICE_P50_MS = 4.0
SLO = {"p95_ms": 50.0, "p99_ms": 100.0}
TRAFFIC = {"pattern": "bursty", "mean_rps": 200.0, "peak_rps": 700.0}
CORES = 4


def text_graph(path: Path) -> Path:
    """input_ids, attention_mask, token_type_ids [batch, seq] -> last_hidden_state
    [batch, seq, 8]: word + type embeddings, zeroed where the mask is 0."""
    rng = np.random.default_rng(0)
    word = numpy_helper.from_array(rng.standard_normal((len(VOCAB), HIDDEN)).astype(np.float32),
                                   "word")
    kind = numpy_helper.from_array(rng.standard_normal((2, HIDDEN)).astype(np.float32), "kind")
    axes = numpy_helper.from_array(np.array([2], np.int64), "axes")
    nodes = [helper.make_node("Gather", ["word", "input_ids"], ["w"]),
             helper.make_node("Gather", ["kind", "token_type_ids"], ["k"]),
             helper.make_node("Add", ["w", "k"], ["wk"]),
             helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["m", "axes"], ["m3"]),
             helper.make_node("Mul", ["wk", "m3"], ["last_hidden_state"])]
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
              for n in ("input_ids", "attention_mask", "token_type_ids")]
    out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                        ["batch", "sequence", HIDDEN])
    graph = helper.make_graph(nodes, "tiny_text", inputs, [out], [word, kind, axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _tokenizer(folder: Path) -> None:
    folder.mkdir(parents=True)
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(str(folder))


def _variant(run: Path, vid: str, kind: str, padding: str = "longest") -> Path:
    folder = run / "variants" / vid
    folder.mkdir(parents=True)
    if kind == "text":
        text_graph(folder / "model.onnx")
        _tokenizer(folder / "tokenizer")
        inputs = [InputSpec(n, "int64", {"0": "batch", "1": "sequence"})
                  for n in ("input_ids", "attention_mask", "token_type_ids")]
        pre = Preprocessing(tokenizer_dir="tokenizer", max_length=12, padding=padding,
                            buckets=[4, 8, 12] if padding == "bucket" else [])
        manifest = Manifest(id=vid, runtime="onnxruntime", precision="fp32", kind="text",
                            task="embedding", model_file="model.onnx", inputs=inputs,
                            output_name="last_hidden_state", preprocessing=pre, max_position=64,
                            threads=ThreadSettings(intra_op=0, inter_op=0))
    else:
        make_mlp(folder / "model.onnx")
        manifest = Manifest(id=vid, runtime="onnxruntime", precision="fp32", kind="tensor",
                            task="embedding", model_file="model.onnx",
                            inputs=[InputSpec("x", "float32", {"0": "batch"})], output_name="y",
                            threads=ThreadSettings(intra_op=1, inter_op=1))
    manifest.files = {str(p.relative_to(folder)): sha256_file(p)
                      for p in sorted(folder.rglob("*")) if p.is_file()}
    data = manifest.to_dict()
    data["manifest_sha256"] = manifest_digest(data)
    (folder / "manifest.json").write_text(json.dumps(data, indent=2))
    return folder


def _ms(value: float) -> Figure:
    return Figure.measured(value, "ms", HW, 400, what="test fixture", artifact="serving.json")


def report(vid: str, policy: ServePolicy = POLICY) -> Report:
    row = PolicyRow(policy_id="p3", variant_id=vid,
                    settings={"max_batch_size": policy.max_batch_size,
                              "max_wait_ms": policy.max_wait_ms, "workers": policy.workers,
                              "max_queue": policy.max_queue},
                    at_mean=Percentiles(p50=_ms(6.0), p95=_ms(11.0), p99=_ms(19.0)),
                    goodput=Figure(value=GOODPUT_RPS, unit="requests/s", source="estimate",
                                   basis="queueing simulator fed with service times measured "
                                   f"on {HW}"),
                    meets_slo=True)
    return Report(
        kind="run", title="tiny run", hardware=HW,
        problem=Problem(statement="s", latency_goal="p99 100 ms", throughput_goal="t",
                        cost_goal="c"),
        diagnosis=Diagnosis(summary="fixture"),
        measurement_plan=MeasurementPlan(log_per_stage=[], compare_variants="",
                                         quality_and_drift=""),
        variants=[VariantRow(variant_id=vid, latency=Percentiles(
            p50=_ms(SERVICE_P50_MS), p95=_ms(5.5), p99=_ms(7.0)))],
        policies=[row],
        recommendation=Recommendation(variant_id=vid, policy_id="p3", title="fixture"),
        serving=Serving(variant_id=vid, policy_id="p3",
                        policy=policy.model_dump(mode="json", exclude_none=True),
                        why="best ranked policy of the sweep"))


def make_run(root: Path, kind: str = "text", vid: str = "ort_int8_dynamic_per_channel",
             padding: str = "longest", slo: dict[str, float] | None = None) -> Path:
    """``root/run``: a run folder whose recommended variant is ``vid``."""
    run = root / "run"
    _variant(run, vid, kind, padding)
    report(vid).save_json(run / "report.json")
    (run / "scenario.yaml").write_text(yaml.safe_dump({
        "model": {"name": "tiny", "task": "embedding"},
        "slo": SLO if slo is None else slo, "traffic": TRAFFIC}))
    hw = HardwareInfo(cpu_model="Test CPU", logical_cores=CORES)
    (run / "hardware.json").write_text(json.dumps(hw.to_dict(), indent=2))
    return run
