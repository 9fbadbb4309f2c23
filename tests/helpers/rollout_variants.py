"""Tiny variant folders and run folders for the rollout tests: the onnx MLP of onnx_graphs.py
as a real onnxruntime variant (manifest, hashes), optionally with its weights disturbed so its
outputs fail a mean_cosine floor (a poor-quality build)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import yaml
from onnx import numpy_helper
from onnx_graphs import make_mlp
from report_fixture import report_dict

from infertune.models.variant import InputSpec, Manifest, ThreadSettings
from infertune.optimize.passes.variant_files import finalize


def mlp_variant(folder: Path, *, noise: float = 0.0, intra_op: int = 1) -> Path:
    """variants/<id>/ with model.onnx; ``noise`` adds that many standard deviations of seeded
    noise to every weight (0: the baseline's exact outputs)."""
    folder.mkdir(parents=True)
    path = make_mlp(folder / "model.onnx")
    if noise:
        model = onnx.load(str(path))
        rng = np.random.default_rng(7)
        for init in model.graph.initializer:
            w = numpy_helper.to_array(init)
            disturbed = w + noise * (w.std() or 1.0) * rng.standard_normal(w.shape)
            init.CopyFrom(numpy_helper.from_array(disturbed.astype(np.float32), init.name))
        onnx.save(model, str(path))
    manifest = Manifest(id=folder.name, runtime="onnxruntime", precision="fp32", kind="tensor",
                        task="embedding", model_file="model.onnx",
                        inputs=[InputSpec("x", "float32", {"0": "batch"})], output_name="y",
                        threads=ThreadSettings(intra_op=intra_op, inter_op=1, spinning=False))
    finalize(folder, manifest)
    return folder


SCENARIO = {
    "model": {"name": "mlp", "family": "other", "task": "embedding", "framework": "onnx"},
    "deployment": {"target": "container", "hardware": {"cpu": "test cpu"},
                   "cost_per_hour_usd": 0.1},
    "inputs": {"typical": {"batch_size": 1}},
    "slo": {"p95_ms": 50, "p99_ms": 100},
    "traffic": {"pattern": "steady", "mean_rps": 50, "peak_rps": 100},
    "constraints": {"quality_floor": {"metric": "mean_cosine", "min": 0.99}},
}


def mlp_run(root: Path, variant_id: str = "ort_fp32", *, noise: float = 0.0,
            policy: dict[str, object] | None = None) -> Path:
    """A run folder as optimize writes it: report.json recommending ``variant_id``, the
    serving policy, scenario.yaml with a mean_cosine floor, and the variant folder."""
    root.mkdir(parents=True)
    mlp_variant(root / "variants" / variant_id, noise=noise)
    (root / "scenario.yaml").write_text(yaml.safe_dump(SCENARIO))
    report = report_dict(recommendation={"variant_id": variant_id}, serving={
        "policy": policy or {"max_batch_size": 8, "max_wait_ms": 1.0}})
    (root / "report.json").write_text(json.dumps(report))
    return root
