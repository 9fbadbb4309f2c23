"""The INT8 and mixed-precision passes on the real all-MiniLM-L6-v2 and its bundled held-out
set: calibrate on 64 sentences, check agreement on 128 others, reload in a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import partial

import numpy as np
import pytest

from infertune.data import default_heldout
from infertune.hardware import detect
from infertune.models import load
from infertune.optimize import REGISTRY, PassContext, QualityTarget, build_variants
from infertune.optimize.passes.onnx_export import OnnxExportPass

pytestmark = [pytest.mark.slow, pytest.mark.timing_free]


@pytest.fixture(scope="module")
def minilm():
    return load("minilm")


@pytest.fixture(scope="module")
def heldout():
    inputs = default_heldout().inputs
    return inputs[:64], inputs[64:192]  # calibration, agreement check (disjoint)


@pytest.fixture(scope="module")
def results(minilm, heldout, tmp_path_factory):
    calibration, samples = heldout
    ctx = PassContext(minilm, detect(), tmp_path_factory.mktemp("minilm_variants"), calibration,
                      samples=samples, n_samples=len(samples),
                      quality=QualityTarget(min_mean_cosine=0.99))
    built = build_variants(minilm, ctx, names=[
        "ort_int8_dynamic_per_channel", "ort_int8_static_minmax", "ort_int8_mixed"])
    return {r.pass_name: r for r in built}


def test_eager_export_fuses_every_attention(results):
    fused = results["ort_fused"]
    assert fused.built, fused.reason
    counts = fused.manifest.op_counts
    fused_norms = fused.manifest.passes[-1].settings["skip_layernorm_fused"]
    norm_op = "SkipLayerNormalization" if fused_norms else "LayerNormalization"
    assert (counts["Attention"], counts[norm_op], counts["BiasGelu"],
            counts["EmbedLayerNormalization"]) == (6, 12, 6, 1)
    assert fused.manifest.agreement.mean_cosine > 0.99999


def test_sdpa_export_fuses_no_attention(minilm, heldout, tmp_path):
    registry = REGISTRY | {"ort_fp32": partial(OnnxExportPass, attn_implementation="sdpa")}
    ctx = PassContext(minilm, detect(), tmp_path, heldout[0][:8])
    fused = build_variants(minilm, ctx, names=["ort_fused"], registry=registry)[-1]
    assert fused.built, fused.reason
    assert "Attention" not in fused.manifest.op_counts
    assert "no Attention node was fused (export used 'sdpa' attention)" in fused.manifest.notes


def test_int8_variants_record_agreement(results):
    for name in ("ort_int8_dynamic_per_channel", "ort_int8_static_minmax"):
        result = results[name]
        assert result.built, result.reason
        agreement = result.manifest.agreement
        assert agreement.n_samples == 128 and agreement.output_shape == [128, 384]
        assert agreement.mean_cosine < 1.0  # INT8 is never bit-exact
    # per-channel dynamic INT8 of minilm measured mean cosine 0.9918 (U8S8 + reduce_range),
    # 0.9921 (U8S8) and 0.9936 (U8U8) on the bundled sentences (issue 13): whichever scheme
    # this CPU takes, it must stay near them, not merely above chance
    dynamic = results["ort_int8_dynamic_per_channel"].manifest.agreement.mean_cosine
    static = results["ort_int8_static_minmax"].manifest.agreement.mean_cosine
    assert dynamic >= 0.985
    # static min-max calibration fixes activation ranges ahead of time, and minilm's outlier
    # activations pay for it: mean cosine 0.931 here (AVX2 EPYC), below the dynamic variant,
    # which is why static INT8 is not in the encoder's default plan
    assert 0.85 <= static < dynamic
    assert results["ort_int8_dynamic_per_channel"].manifest.op_counts["QAttention"] == 6


def test_mixed_precision_meets_the_floor_on_unseen_heldout(results):
    mixed = results["ort_int8_mixed"]
    assert mixed.built, mixed.reason
    settings = mixed.manifest.passes[-1].settings
    assert settings["calibration_mean_cosine"] >= 0.99
    assert mixed.manifest.agreement.mean_cosine >= 0.99  # 128 sentences not calibrated on
    assert [f.name for f in mixed.manifest.fp32_layers] == settings["excluded"]
    assert len(settings["excluded"]) < settings["quantizable_nodes"]


def test_mixed_variant_reloads_in_a_fresh_process(results, heldout):
    path = results["ort_int8_mixed"].path
    texts = list(heldout[1][:4])
    code = ("import json, sys\nfrom infertune.models import load\n"
            "a = load(sys.argv[1])\n"
            "print(json.dumps([list(map(float, v)) for v in a.predict(json.loads(sys.argv[2]))]))")
    proc = subprocess.run([sys.executable, "-c", code, path, json.dumps(texts)],
                          capture_output=True, text=True, timeout=120, check=True)
    there = np.asarray(json.loads(proc.stdout.strip().splitlines()[-1]))
    np.testing.assert_allclose(there, np.asarray(load(path).predict(texts)), atol=1e-5)
