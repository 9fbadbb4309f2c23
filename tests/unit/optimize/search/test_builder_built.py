"""What a run records of each pass's result (search/builder.py _built): read from the typed
manifest, with the title; the record carries the typed manifest (None when the pass did not
build)."""

from __future__ import annotations

from pathlib import Path

from infertune.models.variant import Manifest, PassRecord
from infertune.optimize.passes.variant_files import VariantResult
from infertune.optimize.search.builder import _built


def test_a_built_variant_is_titled_from_its_manifest(tmp_path: Path) -> None:
    manifest = Manifest(id="ort_int8_threads_one", runtime="onnxruntime", precision="int8",
                        kind="text", task="embedding", model_file="model.onnx",
                        passes=[PassRecord("ort_fp32"), PassRecord("ort_int8_threads_one",
                                                                   {"plan": "one"})])
    result = VariantResult("ort_int8_threads_one", "built", path=str(tmp_path), seconds=2.5,
                           manifest=manifest)
    built = _built(result)
    assert (built.variant_id, built.title) == (
        "ort_int8_threads_one", "ONNX Runtime int8 (ort_fp32, ort_int8_threads_one)")
    assert built.manifest == manifest
    assert (built.path, built.skipped, built.is_baseline, built.build_s) == (
        tmp_path, None, False, 2.5)


def test_a_skipped_pass_is_named_by_the_pass() -> None:
    built = _built(VariantResult("torch_fp16", "skipped", reason="needs a GPU"))
    assert (built.variant_id, built.title, built.manifest, built.skipped) == (
        "torch_fp16", "torch_fp16", None, "needs a GPU")
    assert _built(VariantResult("torch_fp32", "built", manifest=Manifest(
        id="torch_fp32", runtime="torch", precision="fp32", kind="text", task="embedding",
        model_file="hf")), baseline_pass="torch_fp32").title == "PyTorch fp32 (no passes)"
