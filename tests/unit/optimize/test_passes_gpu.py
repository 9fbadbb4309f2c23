"""The GPU passes on a machine without a GPU: where they apply (described GPUs, injected
provider lists and torch's CUDA view), the FP16 graph and its numerics against fp32 (run on
the CPU provider: slowly, but the same graph), the TensorRT profile from the traffic's token
lengths, and a GPU variant refused at load when this onnxruntime has no GPU provider."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from optimize_tiny_helpers import SENTENCES

from infertune.hardware import GpuInfo, HardwareInfo
from infertune.models.gpu import OrtGpuRunner
from infertune.models.variant import read_manifest
from infertune.optimize import PassContext, build_variants
from infertune.optimize.passes.ort_cuda_fp16 import OrtCudaFp16Pass
from infertune.optimize.passes.ort_tensorrt_fp16 import OrtTensorrtFp16Pass
from infertune.optimize.passes.torch_fp16 import TorchFp16Pass
from infertune.optimize.passes.variant_files import Variant, agreement, predict_rows

ALL_GPU = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
T4 = GpuInfo("Tesla T4", 15.0, "550.54", "7.5")
P100 = GpuInfo("Tesla P100-PCIE-16GB", 16.0, "550.54", "6.0")


def machine(*gpus: GpuInfo) -> HardwareInfo:
    return HardwareInfo(cpu_model="test cpu", logical_cores=2, flags=["avx2"], gpus=list(gpus))


def providers(*names: str):
    return lambda: list(names)


@pytest.fixture(scope="module")
def gpu_ctx(tiny_adapter, tmp_path_factory: pytest.TempPathFactory):
    """A context on a described T4, with the plain export built (every GPU pass's source)."""
    ctx = PassContext(tiny_adapter, machine(T4), tmp_path_factory.mktemp("gpu"), SENTENCES)
    built: dict[str, Variant] = {}
    [result] = build_variants(tiny_adapter, ctx, names=["ort_fp32"], built=built)
    assert result.built
    return ctx, built["ort_fp32"]


@pytest.mark.parametrize("gpus, available, cuda_reason, trt_reason", [
    ((), ALL_GPU, "lists none", "lists none"),
    ((P100,), ALL_GPU, "no FP16 tensor cores", "no FP16 tensor cores"),
    ((T4,), ALL_GPU, None, None),
    ((T4,), ["CUDAExecutionProvider", "CPUExecutionProvider"], None,
     "no TensorrtExecutionProvider"),
    ((T4,), ["CPUExecutionProvider"], "no CUDAExecutionProvider", "no TensorrtExecutionProvider"),
])
def test_onnxruntime_gpu_passes_apply_by_capability_and_provider(
        tiny_adapter, tmp_path, gpus, available, cuda_reason, trt_reason) -> None:
    ctx = PassContext(tiny_adapter, machine(*gpus), tmp_path)
    for pass_, expected in ((OrtCudaFp16Pass(providers(*available)), cuda_reason),
                            (OrtTensorrtFp16Pass(providers(*available)), trt_reason)):
        found = pass_.applies(ctx)
        if expected is None:
            assert found is None, pass_.name
        else:
            assert found is not None and expected in found, (pass_.name, found)


def test_torch_fp16_needs_tensor_cores_and_a_torch_that_sees_cuda(tiny_adapter, tmp_path) -> None:
    def reason(hw: HardwareInfo, sees: bool) -> str | None:
        return TorchFp16Pass(cuda_available=lambda: sees).applies(
            PassContext(tiny_adapter, hw, tmp_path))

    assert reason(machine(T4), True) is None
    assert "install a CUDA build of torch" in (reason(machine(T4), False) or "")
    assert "no FP16 tensor cores" in (reason(machine(P100), True) or "")
    assert "lists none" in (reason(machine(), True) or "")


def test_torch_fp16_writes_a_cuda_fp16_recipe(gpu_ctx) -> None:
    ctx, _ = gpu_ctx
    variant = TorchFp16Pass(cuda_available=lambda: True).apply(None, ctx)
    manifest = read_manifest(variant.path)
    assert manifest.recipe is not None
    assert (manifest.recipe.dtype, manifest.recipe.mode, manifest.recipe.device) == (
        "fp16", "cast", "cuda")
    assert manifest.precision == "fp16" and manifest.on_gpu()


def test_cuda_fp16_graph_is_fused_fp16_and_agrees_with_fp32(gpu_ctx) -> None:
    ctx, source = gpu_ctx
    variant = OrtCudaFp16Pass(providers(*ALL_GPU)).apply(source, ctx)
    manifest = read_manifest(variant.path)
    assert manifest.precision == "fp16" and manifest.gpu is not None
    assert (manifest.gpu.provider, manifest.gpu.io_binding) == ("cuda", True)
    settings = manifest.passes[-1].settings
    # 2 layers: one Attention per layer and one embedding LayerNorm, fused for the GPU
    assert settings["gpu_fusion"]["Attention"] == 2
    assert settings["gpu_fusion"]["EmbedLayerNormalization"] == 1
    assert set(settings["initializers"]) == {"float16"}
    graph = onnx.load(str(variant.path / "model.onnx")).graph
    # keep_io_types: callers feed and read what the fp32 graph takes and gives
    assert [i.type.tensor_type.elem_type for i in graph.input] == [onnx.TensorProto.INT64] * 3
    assert graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    runner = OrtGpuRunner.open_gpu(str(variant.path / "model.onnx"), manifest.gpu,
                                   stand_in_cpu=True)
    found = agreement(ctx.reference("samples"),
                      predict_rows(ctx.baseline.with_runner(runner), ctx.sample_inputs()))
    assert found.mean_cosine > 0.9999 and found.min_cosine > 0.999
    # fp16 rounding shows: the graph really computes in half precision
    assert 1e-6 < found.max_abs_diff < 0.01


def test_tensorrt_variant_carries_a_profile_from_the_traffic_lengths(gpu_ctx) -> None:
    ctx, source = gpu_ctx
    variant = OrtTensorrtFp16Pass(providers(*ALL_GPU), max_batch=8, opt_batch=4).apply(
        source, ctx)
    manifest = read_manifest(variant.path)
    assert manifest.gpu is not None and manifest.gpu.provider == "tensorrt"
    profile = manifest.gpu.profile
    assert profile is not None
    lengths = sorted(ctx.baseline.token_lengths(ctx.calibration_inputs()))
    expected_opt = lengths[int(np.ceil(0.8 * len(lengths))) - 1]  # 4/(4+1) quantile
    names = ["input_ids", "attention_mask", "token_type_ids"]
    max_length = ctx.baseline.pre.max_length
    assert profile.opt_shapes == {n: [4, expected_opt] for n in names}
    assert profile.min_shapes == {n: [1, 1] for n in names}
    assert profile.max_shapes == {n: [8, max_length] for n in names}
    assert profile.traffic["n"] == len(lengths) and profile.traffic["max"] == lengths[-1]
    assert any("TensorRT profile tuned for batch 4" in note for note in manifest.notes)
    # symbolic shape inference wrote every intermediate tensor's shape into the graph
    graph = onnx.load(str(variant.path / "model.onnx")).graph
    assert len(graph.value_info) > len(graph.node) // 2
    # the graph itself stays fp32 (TensorRT picks FP16 kernels at engine build)
    runner = OrtGpuRunner.open_gpu(str(variant.path / "model.onnx"), manifest.gpu,
                                   precision="fp32", stand_in_cpu=True)
    found = agreement(ctx.reference("samples"),
                      predict_rows(ctx.baseline.with_runner(runner), ctx.sample_inputs()))
    assert found.max_abs_diff < 1e-4


def test_a_gpu_variant_built_here_is_refused_at_load_with_the_provider_named(
        tiny_adapter, tmp_path) -> None:
    """Described as a T4 machine whose onnxruntime has CUDA, the pass builds; the check then
    loads the folder as serve would, on this machine's real onnxruntime, which has no CUDA
    provider: the variant is skipped with that reason, not run on the CPU unnoticed."""
    from functools import partial

    from infertune.optimize.passes import REGISTRY

    registry = REGISTRY | {"ort_cuda_fp16": partial(OrtCudaFp16Pass, providers(*ALL_GPU))}
    ctx = PassContext(tiny_adapter, machine(T4), tmp_path, SENTENCES)
    results = {r.pass_name: r for r in build_variants(tiny_adapter, ctx,
                                                      names=["ort_cuda_fp16"],
                                                      registry=registry)}
    assert results["ort_fp32"].built
    skipped = results["ort_cuda_fp16"]
    assert skipped.status == "skipped"
    assert "this onnxruntime has no CUDAExecutionProvider" in skipped.reason
    assert not (tmp_path / "ort_cuda_fp16").exists()


def test_the_gpu_passes_are_registered_with_their_facts() -> None:
    from infertune.optimize.passes import REGISTRY

    for name in ("ort_cuda_fp16", "ort_tensorrt_fp16", "torch_fp16"):
        facts = REGISTRY.facts(name)
        assert (facts.device, facts.precision) == ("gpu", "fp16"), name
        assert facts.reason(machine(T4)) is None, name
        assert "this machine has no NVIDIA GPU" in (facts.reason(machine()) or ""), name
        assert "the best GPU here has compute 6" in (facts.reason(machine(P100)) or ""), name
        prior = facts.prior(machine(T4))
        assert (prior.speedup, prior.source.startswith("no measurement yet")) == (1.0, True)
    assert REGISTRY.facts("ort_cuda_fp16").runtime == "onnxruntime"


def test_gpu_passes_are_planned_only_where_their_gpu_is() -> None:
    from infertune.optimize.search.builder import FULL_PASSES, QUICK_PASSES, plan_passes

    gpu = ("ort_cuda_fp16", "ort_tensorrt_fp16", "torch_fp16")
    on_t4, _ = plan_passes(quick=False, budget_s=600, hw=machine(T4))
    assert on_t4 == list(FULL_PASSES) and set(gpu) <= set(on_t4)
    quick_t4, left = plan_passes(quick=True, budget_s=600, hw=machine(T4))
    assert "ort_cuda_fp16" in quick_t4 and {"ort_tensorrt_fp16", "torch_fp16"} <= set(left)
    for hw in (machine(), machine(P100)):
        chosen, left = plan_passes(quick=False, budget_s=600, hw=hw)
        assert chosen == [p for p in FULL_PASSES if p not in gpu] and left == []
        quick, left = plan_passes(quick=True, budget_s=600, hw=hw)
        assert quick == [p for p in QUICK_PASSES if p not in gpu]
        assert not set(gpu) & set(left)
    # without a machine, the plan as the facts declare it
    assert plan_passes(quick=False, budget_s=600)[0] == list(FULL_PASSES)


def test_onnxruntime_gpu_counts_as_onnxruntime(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    from infertune import hardware

    def version(dist: str) -> str:
        if dist == "onnxruntime-gpu":
            return "1.31.1"
        raise metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(hardware.metadata, "version", version)
    assert hardware.library_versions() == {"onnxruntime": "1.31.1"}
