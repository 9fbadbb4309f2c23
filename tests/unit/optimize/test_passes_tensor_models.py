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
from onnx_graphs import OUT, WIDTH, make_conv, make_mlp
from optimize_tiny_helpers import hardware

from infertune.models import load
from infertune.optimize import PassContext, QualityTarget, build_variants
from infertune.optimize.builder import registry


def _inputs(n: int = 48) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return list(rng.standard_normal((n, WIDTH)).astype(np.float32))


def _build(model: Path, out: Path, names: list[str]) -> dict:
    baseline = load(model)
    ctx = PassContext(baseline, hardware(["avx2", "avx512_vnni"]), out, _inputs(),
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
    reference = np.stack(load(built["ort_fp32"].path).predict(x))
    for name in names:
        rows = np.asarray(got[built[name].path])
        assert rows.shape == (3, OUT)
        assert np.allclose(rows, reference, atol=0.1), name
    assert load(built["ort_fp32"].path).info.kind == "tensor"


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
    ctx = PassContext(baseline, hardware(["avx2", "avx512_vnni"]), tmp_path / "conv", images)
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
    x = _inputs(4)
    expected = module(torch.from_numpy(np.stack(x))).detach().numpy()
    assert np.allclose(np.stack(load(int8.path).predict(x)), expected, atol=0.05)
