"""The pass registry and build_variants: unknown names, applicability, clean skips."""

from __future__ import annotations

from functools import partial

import pytest
from optimize_tiny_helpers import SENTENCES, hardware

from infertune.errors import ConfigError
from infertune.optimize import REGISTRY, PassContext, build_variants, create_pass
from infertune.optimize.passes.mixed_precision import MixedPrecisionPass
from infertune.optimize.passes.torch_eager import TorchEagerPass


def test_registry_names_are_pass_names():
    for name in REGISTRY:
        assert create_pass(name).name == name


def test_unknown_pass_is_a_config_error(tiny_adapter, tmp_path):
    with pytest.raises(ConfigError, match="unknown pass 'ort_magic'; choose from"):
        create_pass("ort_magic")
    ctx = PassContext(tiny_adapter, hardware([]), tmp_path)
    with pytest.raises(ConfigError, match="unknown pass"):
        build_variants(tiny_adapter, ctx, names=["ort_magic"])


@pytest.mark.parametrize("flags, gpus, reason", [
    (["avx2", "avx512f", "avx512_vnni"], 0, "no avx512_bf16 or amx_bf16"),
    (["avx2", "avx512_bf16"], 0, None),
    (["avx2", "amx_tile", "amx_bf16"], 0, None),
])
def test_bf16_applies_only_with_native_bf16(tiny_adapter, tmp_path, flags, gpus, reason):
    ctx = PassContext(tiny_adapter, hardware(flags, gpus=gpus), tmp_path)
    found = create_pass("torch_bf16").applies(ctx)
    if reason is None:
        assert found is None
    else:
        assert reason in found


def test_passes_that_cannot_apply_are_skipped_with_reasons(tiny_adapter, tmp_path):
    ctx = PassContext(tiny_adapter, hardware(["avx2"], cores=1), tmp_path)  # no calibration
    results = build_variants(tiny_adapter, ctx, names=[
        "torch_fp16", "torch_bf16", "ort_int8_static_minmax", "ort_threads_cores",
        "ort_trim_p99"])
    status = {r.pass_name: (r.status, r.reason) for r in results}
    assert status["torch_fp16"] == (
        "skipped", "needs an NVIDIA GPU; this machine's hardware report lists none")
    assert status["torch_bf16"][0] == "skipped"
    assert "emulated" in status["torch_bf16"][1]
    assert status["ort_int8_static_minmax"] == (
        "skipped", "static INT8 needs held-out inputs to calibrate on; pass --data")
    assert status["ort_threads_cores"][0] == "skipped"
    assert "1 effective core" in status["ort_threads_cores"][1]
    assert "held-out inputs" in status["ort_trim_p99"][1]
    # the sources were built first, once each
    assert [r.pass_name for r in results if r.built] == ["ort_fp32", "ort_fused"]
    assert not (tmp_path / "torch_fp16").exists()


class _Exploding(TorchEagerPass):
    name = "torch_fp32"

    def apply(self, source, ctx):
        raise RuntimeError("exporter blew up\nwith a long trace")


def test_a_failing_pass_is_skipped_and_its_dependents_too(tiny_adapter, tmp_path):
    from infertune.optimize.passes.onnx_export import OnnxExportPass

    class BrokenExport(OnnxExportPass):
        def apply(self, source, ctx):
            raise RuntimeError("unsupported op aten::magic\nstack...")

    registry = REGISTRY | {"ort_fp32": BrokenExport, "torch_fp32": _Exploding}
    ctx = PassContext(tiny_adapter, hardware(["avx2"]), tmp_path, SENTENCES)
    results = build_variants(tiny_adapter, ctx, names=["torch_fp32", "ort_int8_mixed"],
                             registry=registry)
    status = {r.pass_name: (r.status, r.reason) for r in results}
    assert status["torch_fp32"] == ("skipped",
                                    "RuntimeError while building: exporter blew up")
    assert status["ort_fp32"] == ("skipped",
                                  "RuntimeError while building: unsupported op aten::magic")
    assert status["ort_fused"] == ("skipped", "needs variant 'ort_fp32', which was not built")
    assert status["ort_int8_mixed"] == (
        "skipped", "needs variant 'ort_fused' or 'ort_fp32', which was not built")


def test_a_pass_falls_back_to_its_second_source(tiny_adapter, tmp_path):
    """No transformer fusion (here: it fails) still leaves INT8 of the plain export, and the
    variant's pass chain says which graph it was built on."""
    from infertune.optimize.passes.ort_fusion import OrtFusionPass

    class BrokenFusion(OrtFusionPass):
        def applies(self, ctx):
            return "no fusion for this graph"

    registry = REGISTRY | {"ort_fused": BrokenFusion}
    ctx = PassContext(tiny_adapter, hardware(["avx2", "avx512_vnni"]), tmp_path, SENTENCES)
    results = {r.pass_name: r for r in build_variants(
        tiny_adapter, ctx, names=["ort_int8_dynamic_per_channel"], registry=registry)}
    assert results["ort_fused"].reason == "no fusion for this graph"
    int8 = results["ort_int8_dynamic_per_channel"]
    assert int8.built, int8.reason
    assert [p.name for p in int8.manifest.passes] == ["ort_fp32", "ort_int8_dynamic_per_channel"]
    assert "QAttention" not in int8.manifest.op_counts  # no fused Attention to quantize


def test_mixed_precision_keeps_sensitive_layers_until_the_floor_holds(tmp_path):
    from optimize_tiny_helpers import make_tiny_bert

    from infertune.models import load
    from infertune.optimize import QualityTarget

    # one planted outlier weight: per-tensor INT8 of that MatMul rounds its other weights away
    adapter = load(make_tiny_bert(tmp_path / "model", outlier=10.0), task="embedding")
    ctx = PassContext(adapter, hardware(["avx2", "avx512_vnni"]), tmp_path / "out", SENTENCES,
                      quality=QualityTarget(min_mean_cosine=0.999))
    registry = REGISTRY | {"ort_int8_mixed": partial(MixedPrecisionPass, margin=0.0)}
    results = {r.pass_name: r for r in build_variants(
        adapter, ctx, names=["ort_int8_dynamic_per_tensor", "ort_int8_mixed"],
        registry=registry)}
    assert results["ort_int8_dynamic_per_tensor"].manifest.agreement.mean_cosine < 0.999
    mixed = results["ort_int8_mixed"]
    assert mixed.built, mixed.reason
    settings = mixed.manifest.passes[-1].settings
    planted = "/module/encoder/layer.1/intermediate/dense/MatMul"
    assert settings["sensitivity"][0][0] == planted  # found as the most sensitive node
    assert settings["excluded"] == [planted]  # and it alone was enough
    assert settings["calibration_mean_cosine"] >= 0.999
    assert mixed.manifest.agreement.mean_cosine >= 0.999
    assert [f.name for f in mixed.manifest.fp32_layers] == [planted]
    assert "rank 1 of 8" in mixed.manifest.fp32_layers[0].reason
    assert mixed.manifest.op_counts["MatMul"] == 1  # the one left in fp32


def test_mixed_precision_skips_when_no_mix_meets_the_floor(tiny_adapter, tmp_path):
    from infertune.optimize import QualityTarget

    ctx = PassContext(tiny_adapter, hardware(["avx2", "avx512_vnni"]), tmp_path, SENTENCES,
                      quality=QualityTarget(min_mean_cosine=1.0, min_min_cosine=1.0))
    mixed = build_variants(tiny_adapter, ctx, names=["ort_int8_mixed"])[-1]
    assert mixed.status == "skipped"
    assert mixed.reason.startswith(
        "no INT8 mix meets mean cosine >= 1.0 and min cosine >= 1.0 (+0.002 margin)")
