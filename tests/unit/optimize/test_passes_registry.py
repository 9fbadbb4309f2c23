"""The pass registry and build_variants: unknown names, applicability, clean skips."""

from __future__ import annotations

from functools import partial

import pytest
from optimize_tiny_helpers import SENTENCES, hardware

from infertune.errors import ConfigError
from infertune.optimize import REGISTRY, PassContext, build_variants, create_pass
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
    assert status["torch_fp16"] == ("skipped",
                                    "FP16 needs a CUDA GPU; this machine has none visible to torch")
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
    assert status["ort_int8_mixed"] == ("skipped", "needs variant 'ort_fused', which was not built")


def test_mixed_precision_keeps_sensitive_layers_until_the_floor_holds(tiny_adapter, tmp_path):
    from infertune.optimize import QualityTarget
    from infertune.optimize.passes.mixed_precision import MixedPrecisionPass

    baseline_ctx = PassContext(tiny_adapter, hardware(["avx2", "avx512_vnni"]), tmp_path,
                               SENTENCES, quality=QualityTarget(min_mean_cosine=0.0))
    loose = build_variants(tiny_adapter, baseline_ctx, names=["ort_int8_mixed"])[-1]
    per_tensor_cos = loose.manifest.passes[-1].settings["calibration_mean_cosine"]
    assert loose.manifest.fp32_layers == []  # any INT8 mix meets a floor of 0
    # a floor just above all-INT8's measured cosine forces at least one fp32 layer
    floor = 1.0 - (1.0 - per_tensor_cos) / 4
    ctx = PassContext(tiny_adapter, hardware(["avx2", "avx512_vnni"]), tmp_path / "strict",
                      SENTENCES, quality=QualityTarget(min_mean_cosine=floor))
    registry = REGISTRY | {"ort_int8_mixed": partial(MixedPrecisionPass, per_channel=False)}
    strict = build_variants(tiny_adapter, ctx, names=["ort_int8_mixed"], registry=registry)[-1]
    assert strict.built, strict.reason
    settings = strict.manifest.passes[-1].settings
    assert settings["calibration_mean_cosine"] >= floor
    kept = [layer.name for layer in strict.manifest.fp32_layers]
    assert kept == settings["excluded"] and 1 <= len(kept) < settings["quantizable_nodes"]
    ranked = [node for node, _, _ in settings["sensitivity"]]
    assert kept == ranked[: len(kept)]  # the most sensitive first, one at a time
    assert "kept fp32 to meet mean cosine >=" in strict.manifest.fp32_layers[0].reason
