"""The onnxruntime passes on a user's own .onnx file (a tensor model): ort_fp32 copies it, the
INT8 and thread passes build on that copy (no transformer fusion applies), and every variant
reloads as a tensor model in a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cpu_profiles import this_cpu
from int8_reference import simulate_dynamic_int8
from onnx_graphs import OUT, WIDTH, make_conv, make_mlp
from optimize_tiny_helpers import hardware

from infertune.hardware import int8_saturation_risk
from infertune.models import load
from infertune.optimize import PassContext, QualityTarget, build_variants
from infertune.optimize.search.builder import registry


def _inputs(n: int = 48) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return list(rng.standard_normal((n, WIDTH)).astype(np.float32))


def _build(model: Path, out: Path, names: list[str]) -> dict:
    # this CPU, not a simulated one: INT8 numerics depend on the kernels that really run
    baseline = load(model)
    ctx = PassContext(baseline, this_cpu(), out, _inputs(),
                      quality=QualityTarget(min_mean_cosine=0.99))
    return {r.pass_name: r for r in build_variants(baseline, ctx, names=names,
                                                   registry=registry())}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("onnx_tensor")
    names = ["ort_int8_dynamic_per_channel", "ort_int8_static_minmax", "ort_threads_one",
             "ort_int8_threads_one", "ort_int8_mixed"]
    return _build(make_mlp(root / "user" / "mlp.onnx", external_data=True), root / "variants",
                  names)


def test_the_onnx_file_is_copied_as_ort_fp32(built) -> None:
    result = built["ort_fp32"]
    assert result.built, result.reason
    manifest = result.manifest
    assert (manifest.kind, manifest.runtime, manifest.output_name) == ("tensor", "onnxruntime",
                                                                       "y")
    assert [(i.name, i.dtype, i.dynamic_axes) for i in manifest.inputs] == \
        [("x", "float32", {"0": "batch"})]
    assert "copied as is" in manifest.passes[0].settings["exporter"]
    # external weights came into the one file: the folder holds no .data file
    assert sorted(p.name for p in Path(result.path).iterdir()) == ["manifest.json",
                                                                   "model.onnx"]
    assert manifest.agreement.max_abs_diff == 0.0
    assert built["ort_fused"].status == "skipped"


def test_int8_and_threads_build_on_the_copy(built) -> None:
    dyn = built["ort_int8_dynamic_per_channel"].manifest
    assert [p.name for p in dyn.passes] == ["ort_fp32", "ort_int8_dynamic_per_channel"]
    assert dyn.op_counts["MatMulInteger"] == 3
    assert dyn.agreement.mean_cosine > 0.99
    static = built["ort_int8_static_minmax"].manifest
    assert static.op_counts["QuantizeLinear"] > 0
    assert static.passes[-1].settings["calibration_inputs"] == 48
    threads = built["ort_threads_one"].manifest
    assert [p.name for p in threads.passes] == ["ort_fp32", "ort_threads_one"]
    assert threads.threads.intra_op == 1
    assert built["ort_int8_threads_one"].built
    # mixed precision needs a MatMul it can keep in fp32 one at a time: it found three
    assert built["ort_int8_mixed"].built, built["ort_int8_mixed"].reason


def test_tensor_variants_reload_in_a_fresh_process(built) -> None:
    names = ["ort_fp32", "ort_int8_dynamic_per_channel", "ort_int8_static_minmax"]
    x = _inputs(3)
    code = ("import json, sys\nimport numpy as np\nfrom infertune.models import load\n"
            "x = [np.asarray(r, dtype=np.float32) for r in json.loads(sys.argv[1])]\n"
            "print(json.dumps({p: [list(map(float, y)) for y in load(p).predict(x)] "
            "for p in sys.argv[2:]}))\n")
    out = subprocess.run([sys.executable, "-c", code, json.dumps([r.tolist() for r in x]),
                          *(built[n].path for n in names)],
                         capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    for name in names:  # the fresh process computes what this one does, to float rounding
        rows = np.asarray(got[built[name].path])
        assert rows.shape == (3, OUT)
        assert np.allclose(rows, np.stack(load(built[name].path).predict(x)), atol=1e-6), name
    assert load(built["ort_fp32"].path).info.kind == "tensor"


def test_dynamic_int8_computes_what_its_recorded_scheme_should(built) -> None:
    """The variant's outputs match a numpy model of its own recorded INT8 scheme (no
    saturation): this holds on any CPU for a scheme that is safe there, and fails by ~0.14 on
    this MLP for full-range U8S8 run without VNNI."""
    int8 = built["ort_int8_dynamic_per_channel"]
    _assert_matches_its_scheme(int8, built["ort_fp32"], _inputs(8))
    settings = int8.manifest.passes[-1].settings
    scheme = int8.manifest.int8_scheme()
    assert scheme == ("uint8", settings["weight_type"], settings["reduce_range"])
    assert int8_saturation_risk(this_cpu(), *scheme) is None  # built here: safe here
    assert built["ort_fp32"].manifest.int8_scheme() is None


def _assert_matches_its_scheme(int8, fp32, x: list[np.ndarray]) -> None:
    settings = int8.manifest.passes[-1].settings
    assert settings["weight_type"] in ("int8", "uint8") and "scheme_reason" in settings
    expected = simulate_dynamic_int8(Path(fp32.path) / "model.onnx", np.stack(x),
                                     weight_type=settings["weight_type"],
                                     reduce_range=settings["reduce_range"],
                                     per_channel=settings["per_channel"])
    got = np.stack(load(int8.path).predict(x))
    assert np.abs(got - expected).max() < 1e-3, settings


def test_gemm_and_conv_graphs(tmp_path) -> None:
    """onnxruntime's dynamic quantizer takes Gemm (as MatMul) but not Conv: a Conv graph's
    dynamic INT8 is skipped with the reason, and static INT8 quantizes the Conv."""
    gemm = _build(make_mlp(tmp_path / "gemm.onnx", op="Gemm"), tmp_path / "gemm",
                  ["ort_int8_dynamic_per_channel", "ort_int8_static_minmax"])
    assert gemm["ort_int8_dynamic_per_channel"].manifest.op_counts["MatMulInteger"] == 3
    assert gemm["ort_int8_static_minmax"].manifest.op_counts["QuantizeLinear"] > 0
    baseline = load(make_conv(tmp_path / "conv.onnx"))
    rng = np.random.default_rng(2)
    images = list(rng.standard_normal((32, 1, 8, 8)).astype(np.float32))
    ctx = PassContext(baseline, this_cpu(), tmp_path / "conv", images)
    conv = {r.pass_name: r for r in build_variants(
        baseline, ctx, names=["ort_int8_dynamic_per_channel", "ort_int8_static_minmax"],
        registry=registry())}
    dynamic = conv["ort_int8_dynamic_per_channel"]
    assert dynamic.status == "skipped"
    assert "no MatMul, Gemm or Attention with constant weights" in dynamic.reason
    assert not (tmp_path / "conv" / "ort_int8_dynamic_per_channel").exists()
    static = conv["ort_int8_static_minmax"]
    assert static.built, static.reason
    assert static.manifest.op_counts["QuantizeLinear"] > 0
    assert static.manifest.agreement.mean_cosine > 0.9


def test_a_torchscript_model_is_exported_and_quantized(tmp_path) -> None:
    import torch

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(WIDTH, 32), torch.nn.ReLU(),
                                 torch.nn.Linear(32, OUT)).eval()
    path = tmp_path / "mlp.pt"
    torch.jit.save(torch.jit.trace(module, torch.zeros(1, WIDTH)), str(path))
    np.save(tmp_path / "mlp.example.npy", np.zeros(WIDTH, np.float32))
    results = _build(path, tmp_path / "variants", ["ort_int8_dynamic_per_channel"])
    fp32 = results["ort_fp32"]
    assert fp32.built, fp32.reason
    assert fp32.manifest.passes[0].settings["dynamic_axes"] == {"0": "batch"}
    assert fp32.manifest.agreement.max_abs_diff < 1e-5
    int8 = results["ort_int8_dynamic_per_channel"]
    assert int8.built, int8.reason
    _assert_matches_its_scheme(int8, fp32, _inputs(4))


@pytest.mark.parametrize("floor, trials, chosen, why", [
    (0.99, ["U8S8 reduce_range"], "U8S8 reduce_range", "first scheme meeting"),
    (0.99985, ["U8S8 reduce_range", "U8U8"], "U8U8", "first scheme meeting"),
    (0.999999, ["U8S8 reduce_range", "U8U8"], "U8U8", "kept the most accurate"),
])
def test_without_vnni_the_pass_keeps_the_first_safe_scheme_meeting_the_floor(
        tmp_path, floor, trials, chosen, why) -> None:
    """On an AVX2-only description both safe schemes are candidates (neither saturates on any
    CPU, so this runs anywhere). On this MLP's 48 inputs U8S8 with 7-bit weights gives mean
    cosine ~0.99978 and U8U8 ~0.99990 against fp32."""
    baseline = load(make_mlp(tmp_path / "mlp.onnx"))
    ctx = PassContext(baseline, hardware(["avx2"]), tmp_path / "v", _inputs(),
                      quality=QualityTarget(min_mean_cosine=floor))
    result = {r.pass_name: r for r in build_variants(
        baseline, ctx, names=["ort_int8_dynamic_per_channel"], registry=registry())}
    int8 = result["ort_int8_dynamic_per_channel"]
    settings = int8.manifest.passes[-1].settings
    assert [t["scheme"] for t in settings["scheme_trials"]] == trials
    label = "U8U8" if settings["weight_type"] == "uint8" else "U8S8 reduce_range"
    assert label == chosen and why in settings["scheme_choice"]
    _assert_matches_its_scheme(int8, result["ort_fp32"], _inputs(4))
