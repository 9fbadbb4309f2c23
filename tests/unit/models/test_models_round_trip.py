"""ModelInfo and the variant manifest round-trip through JSON by the one serialisation (Serial),
and write exactly the dict the hand-written to_dict wrote before (the OLD_* literals were
captured by running that code on these instances), so files written then still load."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infertune.models.adapter import ModelInfo
from infertune.models.gpu import OrtGpuSettings, TrtProfile
from infertune.models.openvino_runner import OpenVinoSettings
from infertune.models.variant import (
    Agreement,
    Fp32Layer,
    InputSpec,
    Manifest,
    PassRecord,
    Preprocessing,
    ThreadSettings,
    TorchRecipe,
)

INFO = ModelInfo(
    "minilm",
    "0123456789ab",
    "text",
    "embedding",
    "onnxruntime",
    "int8",
    ["input_ids", "attention_mask"],
    "/m/minilm",
    128,
    512,
    "tok",
)
TRT = TrtProfile(
    {"input_ids": [1, 1]},
    {"input_ids": [8, 32]},
    {"input_ids": [32, 128]},
    traffic={"n": 100.0, "p50": 30.0},
)
GPU = OrtGpuSettings("tensorrt", 1, io_binding=False, fp16=False, engine_cache=False, profile=TRT)
AGREEMENT = Agreement(16, 0.002, 0.9995, 0.998, [16, 384])
MANIFEST = Manifest(
    "ort-int8",
    "onnxruntime",
    "int8",
    "text",
    "embedding",
    "model.onnx",
    passes=[
        PassRecord(
            "int8-dynamic", {"weight_type": "qint8", "reduce_range": True, "per_channel": [1, 2]}
        )
    ],
    inputs=[InputSpec("input_ids", "int64", {"0": "batch", "1": "seq"})],
    output_name="out",
    threads=ThreadSettings(2, 1, False, "extended", ["SkipLayerNormFusion"]),
    preprocessing=Preprocessing("tokenizer", 128, "bucket", [16, 32], 0.05, "longest_first"),
    recipe=TorchRecipe(
        "bf16", "autocast", "cuda:0", True, "max-autotune", False, "eager", True, "sdpa"
    ),
    openvino=OpenVinoSettings("bf16", 4, 2, [32, 64], False, False),
    gpu=GPU,
    source={"ref": "minilm", "sha256": "abc"},
    max_position=512,
    libraries={"onnxruntime": "1.20"},
    op_counts={"MatMulInteger": 12},
    agreement=AGREEMENT,
    first_call_s=0.25,
    fp32_layers=[Fp32Layer("/pooler", "feeds a softmax")],
    notes=["n"],
    files={"model.onnx": "deadbeef"},
)
BARE_MANIFEST = Manifest("t", "torch", "fp32", "tensor", "other", "hf")

OLD_INFO = {
    "id": "minilm",
    "version": "0123456789ab",
    "kind": "text",
    "task": "embedding",
    "runtime": "onnxruntime",
    "precision": "int8",
    "input_names": ["input_ids", "attention_mask"],
    "source": "/m/minilm",
    "max_length": 128,
    "max_position": 512,
    "tokenizer_dir": "tok",
}
OLD_AGREEMENT = {
    "n_samples": 16,
    "max_abs_diff": 0.002,
    "mean_cosine": 0.9995,
    "min_cosine": 0.998,
    "output_shape": [16, 384],
}
OLD_MANIFEST = {
    "id": "ort-int8",
    "runtime": "onnxruntime",
    "precision": "int8",
    "kind": "text",
    "task": "embedding",
    "model_file": "model.onnx",
    "passes": [
        {
            "name": "int8-dynamic",
            "settings": {"weight_type": "qint8", "reduce_range": True, "per_channel": [1, 2]},
        }
    ],
    "inputs": [{"name": "input_ids", "dtype": "int64", "dynamic_axes": {"0": "batch", "1": "seq"}}],
    "output_name": "out",
    "threads": {
        "intra_op": 2,
        "inter_op": 1,
        "spinning": False,
        "graph_level": "extended",
        "disabled_optimizers": ["SkipLayerNormFusion"],
    },
    "preprocessing": {
        "tokenizer_dir": "tokenizer",
        "max_length": 128,
        "padding": "bucket",
        "buckets": [16, 32],
        "truncated_share": 0.05,
        "truncation": "longest_first",
    },
    "recipe": {
        "dtype": "bf16",
        "mode": "autocast",
        "device": "cuda:0",
        "compile": True,
        "compile_mode": "max-autotune",
        "compile_dynamic": False,
        "compile_backend": "eager",
        "int8_dynamic": True,
        "attn_implementation": "sdpa",
    },
    "openvino": {
        "precision_hint": "bf16",
        "num_threads": 4,
        "num_streams": 2,
        "static_lengths": [32, 64],
        "cache": False,
        "output_sequence_axis": False,
    },
    "gpu": {
        "provider": "tensorrt",
        "device_id": 1,
        "io_binding": False,
        "fp16": False,
        "engine_cache": False,
        "profile": {
            "min_shapes": {"input_ids": [1, 1]},
            "opt_shapes": {"input_ids": [8, 32]},
            "max_shapes": {"input_ids": [32, 128]},
            "traffic": {"n": 100.0, "p50": 30.0},
        },
    },
    "source": {"ref": "minilm", "sha256": "abc"},
    "max_position": 512,
    "libraries": {"onnxruntime": "1.20"},
    "op_counts": {"MatMulInteger": 12},
    "agreement": {
        "n_samples": 16,
        "max_abs_diff": 0.002,
        "mean_cosine": 0.9995,
        "min_cosine": 0.998,
        "output_shape": [16, 384],
    },
    "first_call_s": 0.25,
    "fp32_layers": [{"name": "/pooler", "reason": "feeds a softmax"}],
    "notes": ["n"],
    "files": {"model.onnx": "deadbeef"},
    "schema": "infertune.variant/v1",
}
OLD_BARE_MANIFEST: dict[str, Any] = {
    "id": "t",
    "runtime": "torch",
    "precision": "fp32",
    "kind": "tensor",
    "task": "other",
    "model_file": "hf",
    "passes": [],
    "inputs": [],
    "output_name": "",
    "threads": {
        "intra_op": 0,
        "inter_op": 0,
        "spinning": True,
        "graph_level": "all",
        "disabled_optimizers": [],
    },
    "preprocessing": {
        "tokenizer_dir": None,
        "max_length": None,
        "padding": "longest",
        "buckets": [],
        "truncated_share": None,
        "truncation": "only_second",
    },
    "recipe": None,
    "openvino": None,
    "gpu": None,
    "source": {},
    "max_position": None,
    "libraries": {},
    "op_counts": {},
    "agreement": None,
    "first_call_s": None,
    "fp32_layers": [],
    "notes": [],
    "files": {},
    "schema": "infertune.variant/v1",
}

CASES: list[Any] = [INFO, GPU, OrtGpuSettings(), AGREEMENT, MANIFEST, BARE_MANIFEST]


@pytest.mark.parametrize("obj", CASES, ids=lambda o: type(o).__name__)
def test_round_trip_through_json(obj: Any) -> None:
    assert type(obj).from_dict(json.loads(json.dumps(obj.to_dict()))) == obj


OLD: list[tuple[Any, dict[str, Any]]] = [
    (INFO, OLD_INFO),
    (AGREEMENT, OLD_AGREEMENT),
    (MANIFEST, OLD_MANIFEST),
    (BARE_MANIFEST, OLD_BARE_MANIFEST),
]


@pytest.mark.parametrize(("obj", "old"), OLD, ids=lambda o: type(o).__name__)
def test_writes_and_reads_what_the_hand_written_code_wrote(obj: Any, old: dict[str, Any]) -> None:
    assert obj.to_dict() == old
    assert type(obj).from_dict(old) == obj
