"""Variant folders: manifest round trip, hashes, tamper detection, agreement arithmetic."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from infertune.errors import ConfigError, ModelLoadError
from infertune.models import load
from infertune.models.variant import MANIFEST, Manifest, read_manifest, sha256_file
from infertune.optimize import QualityTarget, VariantResult, agreement
from infertune.optimize.passes.variant_files import Variant


def test_agreement_exact_values():
    ref = np.array([[1.0, 0.0], [0.0, 2.0]])
    out = np.array([[1.0, 0.0], [2.0, 0.0]])
    found = agreement(ref, out)
    assert found.n_samples == 2
    assert found.mean_cosine == pytest.approx(0.5)
    assert found.min_cosine == pytest.approx(0.0)
    assert found.max_abs_diff == pytest.approx(2.0)
    assert found.output_shape == [2, 2]


def test_quality_target_floor():
    found = agreement(np.array([[1.0, 0.0], [1.0, 0.0]]), np.array([[1.0, 0.0], [1.0, 1.0]]))
    assert found.mean_cosine == pytest.approx((1 + 2 ** -0.5) / 2)
    assert QualityTarget(min_mean_cosine=0.85).holds(found)
    assert not QualityTarget(min_mean_cosine=0.86).holds(found)
    assert not QualityTarget(min_mean_cosine=0.5, min_min_cosine=0.8).holds(found)
    with pytest.raises(ConfigError):
        QualityTarget(min_mean_cosine=1.5)


def test_manifest_and_result_round_trip(built_all):
    _, results = built_all
    for result in results.values():
        again = VariantResult.from_dict(json.loads(json.dumps(result.to_dict())))
        assert again == result
    manifest = results["ort_int8_mixed"].manifest
    assert Manifest.from_dict(manifest.to_dict()) == manifest


def test_manifest_records_provenance(built_all):
    _, results = built_all
    m = results["ort_fused"].manifest
    assert m.schema == "infertune.variant/v1"
    assert [p.name for p in m.passes] == ["ort_fp32", "ort_fused"]
    assert m.passes[0].settings["attn_implementation"] == "eager"
    assert [(i.name, i.dtype, i.dynamic_axes) for i in m.inputs][0] == (
        "input_ids", "int64", {"0": "batch", "1": "sequence"})
    assert m.preprocessing.tokenizer_dir == "tokenizer"
    assert len(m.source["sha256"]) == 64
    assert {"onnxruntime", "onnx", "torch"} <= set(m.libraries)
    folder = Path(results["ort_fused"].path)
    assert m.files["model.onnx"] == sha256_file(folder / "model.onnx")
    assert any(k.startswith("tokenizer/") for k in m.files)


def _copy(result: VariantResult, tmp_path: Path) -> Path:
    folder = tmp_path / "copy"
    shutil.copytree(result.path, folder)
    return folder


def test_copied_variant_loads_anywhere(built_all, tmp_path):
    _, results = built_all
    folder = _copy(results["ort_fused"], tmp_path)
    adapter = load(folder)
    assert adapter.info.id == "ort_fused"
    assert adapter.info.runtime == "onnxruntime"
    assert len(adapter.predict(["the model was slow"])[0]) == 32


def test_hand_edited_manifest_is_refused(built_all, tmp_path):
    _, results = built_all
    folder = _copy(results["ort_fused"], tmp_path)
    data = json.loads((folder / MANIFEST).read_text())
    data["precision"] = "int8"
    (folder / MANIFEST).write_text(json.dumps(data))
    with pytest.raises(ModelLoadError, match="edited after it was built"):
        load(folder)


def test_corrupt_model_file_is_refused(built_all, tmp_path):
    _, results = built_all
    folder = _copy(results["ort_int8_dynamic_per_channel"], tmp_path)
    model = folder / "model.onnx"
    model.unlink()  # the copy may share bytes with the original through a hard link
    model.write_bytes(b"not a graph")
    with pytest.raises(ModelLoadError, match="does not match its SHA-256"):
        load(folder)


def test_missing_file_and_bad_schema_are_refused(built_all, tmp_path):
    _, results = built_all
    folder = _copy(results["torch_fp32"], tmp_path)
    (folder / "hf" / "config.json").unlink()
    with pytest.raises(ModelLoadError, match="hf/config.json is missing"):
        Variant.open(folder)
    (folder / MANIFEST).write_text(json.dumps({"schema": "other/v9"}))
    with pytest.raises(ModelLoadError, match="schema"):
        read_manifest(folder)
    (folder / MANIFEST).write_text("{not json")
    with pytest.raises(ModelLoadError, match=r"manifest.json: not valid JSON at line 1, "
                       r"column 2 .*; rebuild the variant"):
        read_manifest(folder)
