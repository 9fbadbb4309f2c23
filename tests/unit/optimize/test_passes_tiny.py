"""Every pass on a tiny BERT: built, checked, and its manifest says what happened."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from optimize_tiny_helpers import SENTENCES, hardware, tiny_registry

from infertune.optimize.passes._onnx import int8_scheme, int8_schemes

EXPECTED_BUILT = {
    "torch_fp32", "torch_bf16", "torch_compile", "torch_int8_dynamic", "ort_fp32",
    "ort_graph_basic", "ort_graph_extended", "ort_fused", "ort_int8_dynamic_per_tensor",
    "ort_int8_dynamic_per_channel", "ort_int8_static_minmax", "ort_int8_static_entropy",
    "ort_int8_static_percentile", "ort_int8_mixed", "ort_int8_mixed_per_channel",
    "ort_threads_one", "ort_threads_cores", "ort_threads_cores_nospin", "ort_trim_p99",
    "ort_bucketed", "ort_int8_threads_one", "ort_int8_threads_cores_nospin",
}


def test_every_pass_builds_or_says_why(built_all):
    _, results = built_all
    built = {name for name, r in results.items() if r.built}
    assert built == EXPECTED_BUILT
    assert results["torch_fp16"].status == "skipped"
    assert "GPU" in results["torch_fp16"].reason


def test_every_built_variant_was_checked(built_all):
    ctx, results = built_all
    n = len(ctx.sample_inputs())
    for name in EXPECTED_BUILT:
        agreement = results[name].manifest.agreement
        assert agreement is not None, name
        assert agreement.n_samples == n
        assert agreement.output_shape == [n, 32]
        assert results[name].manifest.first_call_s > 0
    assert results["torch_fp32"].manifest.agreement.max_abs_diff == 0.0
    for name in ("ort_fp32", "ort_fused", "torch_bf16", "ort_int8_dynamic_per_channel"):
        assert results[name].manifest.agreement.mean_cosine > 0.99, name


def test_fusion_counts_are_read_from_the_graph(built_all):
    _, results = built_all
    plain = results["ort_fp32"].manifest.op_counts
    fused = results["ort_fused"].manifest.op_counts
    assert "Attention" not in plain
    # 2 layers: one Attention and one BiasGelu per layer, two residual LayerNorms per layer,
    # fused into SkipLayerNorms only when this machine's timing probe favoured the fused kernel
    assert fused["Attention"] == 2
    assert fused["BiasGelu"] == 2
    assert fused["EmbedLayerNormalization"] == 1
    manifest = results["ort_fused"].manifest
    settings = manifest.passes[-1].settings
    assert settings["skip_layernorm_fused"] == settings["skip_layernorm_probe"]["fused"]
    norm_op = "SkipLayerNormalization" if settings["skip_layernorm_fused"] else \
        "LayerNormalization"
    assert fused[norm_op] == 4
    assert ("SkipLayerNormFusion" in manifest.threads.disabled_optimizers) is not \
        settings["skip_layernorm_fused"]
    reported = manifest.passes[-1].settings["optimizer_reported"]
    assert reported["Attention"] == fused["Attention"]


@pytest.mark.parametrize("mode", ["fused", "unfused"])
def test_skip_layernorm_fusion_can_be_forced(tiny_adapter, tmp_path, mode):
    """When the fused kernel is left out, the session is told not to re-fuse it at load, and
    the variant still loads and agrees with fp32."""
    from functools import partial

    from infertune.models import load
    from infertune.optimize import PassContext, QualityTarget, build_variants
    from infertune.optimize.passes.ort_fusion import OrtFusionPass

    registry = tiny_registry() | {"ort_fused": partial(OrtFusionPass, skip_layernorm=mode)}
    ctx = PassContext(tiny_adapter, hardware(["avx2", "avx512_vnni"]), tmp_path, SENTENCES,
                      quality=QualityTarget(min_mean_cosine=0.99))
    result = build_variants(tiny_adapter, ctx, names=["ort_fused"], registry=registry)[-1]
    assert result.built, result.reason
    counts, manifest = result.manifest.op_counts, result.manifest
    assert "skip_layernorm_probe" not in manifest.passes[-1].settings  # forced: no timing
    if mode == "fused":
        assert counts["SkipLayerNormalization"] == 4 and "LayerNormalization" not in counts
        assert manifest.threads.disabled_optimizers == []
    else:
        assert counts["LayerNormalization"] == 4 and "SkipLayerNormalization" not in counts
        assert manifest.threads.disabled_optimizers == ["SkipLayerNormFusion"]
        assert "SkipLayerNormalization left unfused: as asked (skip_layernorm='unfused')" in \
            manifest.notes
    assert manifest.agreement.mean_cosine > 0.9999
    reloaded = load(result.path)
    expected = np.stack(tiny_adapter.predict(SENTENCES[:4]))
    assert np.allclose(np.stack(reloaded.predict(SENTENCES[:4])), expected, atol=1e-4)


@pytest.mark.parametrize("fused_us, unfused_us, keeps_fusion", [(30.0, 200.0, True),
                                                                (200.0, 30.0, False),
                                                                (95.0, 100.0, False)])
def test_fused_kernel_is_kept_only_when_it_wins_clearly(fused_us, unfused_us, keeps_fusion):
    from infertune.optimize.passes.ort_fusion import SkipLayerNormProbe

    probe = SkipLayerNormProbe(384, 128, 7, fused_us, unfused_us)
    assert probe.fuse is keeps_fusion
    assert probe.to_settings().fused is keeps_fusion


def test_skip_layernorm_probe_times_both_forms():
    from infertune.optimize.passes.ort_fusion import time_skip_layernorm

    probe = time_skip_layernorm(32, tokens=16, blocks=3, calls=5)
    settings = probe.to_settings()
    assert settings.fused_us > 0 and settings.unfused_us > 0
    assert (settings.hidden, settings.tokens, settings.blocks) == (32, 16, 3)
    assert settings.fused == (probe.fused_us <= 0.9 * probe.unfused_us)


def test_int8_variants_contain_int8_ops(built_all):
    ctx, results = built_all
    dyn = results["ort_int8_dynamic_per_channel"].manifest
    assert dyn.op_counts["QAttention"] == 2 and dyn.op_counts["MatMulInteger"] == 6
    settings = dyn.passes[-1].settings
    offered = {s.label: s for s in int8_schemes(ctx.hardware)}
    chosen = next(s for s in offered.values()
                  if (s.weight, s.reduce_range) == (settings["weight_type"],
                                                    settings["reduce_range"]))
    assert settings["scheme_reason"] == chosen.reason
    if len(offered) > 1:  # the choice was made by measurement: the evidence is recorded
        assert [t["scheme"] for t in settings["scheme_trials"]][-1] == chosen.label
        assert settings["scheme_trials"][-1]["meets_floor"] is True
    static = results["ort_int8_static_minmax"].manifest
    assert static.op_counts["QuantizeLinear"] > 0 and static.op_counts["DequantizeLinear"] > 0
    assert static.passes[-1].settings["calibration_inputs"] == len(SENTENCES)


def test_int8_scheme_follows_cpu_flags():
    assert int8_scheme(hardware(["avx2", "avx512_vnni"])).reduce_range is False
    plain = int8_scheme(hardware(["avx2"]))
    assert (plain.activation, plain.weight, plain.reduce_range) == ("uint8", "int8", True)
    assert [s.label for s in int8_schemes(hardware(["avx2"]))] == ["U8S8 reduce_range", "U8U8"]


def test_thread_variants_use_effective_cores(built_all):
    _, results = built_all
    one = results["ort_threads_one"].manifest.threads
    cores = results["ort_threads_cores"].manifest.threads
    nospin = results["ort_threads_cores_nospin"].manifest.threads
    assert (one.intra_op, one.inter_op) == (1, 1)
    assert (cores.intra_op, cores.spinning) == (2, True)
    assert (nospin.intra_op, nospin.spinning) == (2, False)


def test_trim_reports_truncated_share(built_all, tiny_adapter):
    _, results = built_all
    lengths = np.asarray(tiny_adapter.token_lengths(SENTENCES))
    expected = int(8 * np.ceil(np.percentile(lengths, 99) / 8))
    pre = results["ort_trim_p99"].manifest.preprocessing
    assert pre.max_length == expected
    assert pre.truncated_share == pytest.approx(float((lengths > expected).mean()))
    assert results["ort_bucketed"].manifest.preprocessing.padding == "bucket"


def test_torch_recipes(built_all):
    _, results = built_all
    assert results["torch_bf16"].manifest.recipe.dtype == "bf16"
    assert results["torch_bf16"].manifest.precision == "bf16"
    assert results["torch_compile"].manifest.recipe.compile is True
    assert results["torch_int8_dynamic"].manifest.recipe.int8_dynamic is True
    assert not any(p.endswith((".bin", ".pt", ".pkl"))
                   for r in results.values() if r.built for p in r.manifest.files)


@pytest.mark.slow
@pytest.mark.timing_free
def test_variants_reload_in_a_fresh_process(built_all):
    ctx, results = built_all
    names = ["torch_bf16", "torch_int8_dynamic", "ort_int8_mixed", "ort_trim_p99"]
    paths = [results[n].path for n in names]
    code = (
        "import json, sys\n"
        "from infertune.models import load\n"
        "out = {}\n"
        "for p in sys.argv[2:]:\n"
        "    a = load(p)\n"
        "    out[a.info.id] = [list(map(float, v)) for v in a.predict(json.loads(sys.argv[1]))]\n"
        "print(json.dumps(out))\n"
    )
    texts = list(SENTENCES[:3])
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(texts), *paths],
                          capture_output=True, text=True, timeout=120, check=True)
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(found) == sorted(names)
    for name, path in zip(names, paths, strict=True):
        from infertune.models import load

        here = np.asarray(load(path).predict(texts))
        np.testing.assert_allclose(np.asarray(found[name]), here, rtol=1e-5, atol=1e-5)
