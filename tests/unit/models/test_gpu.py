"""models/gpu.py on a machine without a GPU: the capability and provider gates on described
GPUs and injected provider lists, the provider plan, the refusal of a session onnxruntime
opened on another provider, the TensorRT profile shapes, and the IO-binding runner run on the
CPU provider as a stand-in (same graph, feeds and binding code, no device)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from onnx_graphs import make_mlp

from infertune.errors import ModelLoadError
from infertune.hardware import GpuInfo, HardwareInfo
from infertune.models.gpu import (
    OrtGpuRunner,
    OrtGpuSettings,
    TrtProfile,
    fp16_gpu_reason,
    provider_reason,
    session_providers,
    trt_profile,
)
from infertune.models.runners import OrtRunner

ALL_GPU = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
NAMES = ["input_ids", "attention_mask"]


def machine(*gpus: GpuInfo) -> HardwareInfo:
    return HardwareInfo(cpu_model="test cpu", logical_cores=4, gpus=list(gpus))


T4 = GpuInfo("Tesla T4", 15.0, "550.54", "7.5")
P100 = GpuInfo("Tesla P100-PCIE-16GB", 16.0, "550.54", "6.0")
SILENT = GpuInfo("Some GPU", 8.0, "390.1", None)


def test_fp16_needs_a_gpu_with_tensor_cores() -> None:
    assert fp16_gpu_reason(machine(T4)) is None
    assert fp16_gpu_reason(machine()) == ("needs an NVIDIA GPU; this machine's hardware report "
                                          "lists none")
    assert fp16_gpu_reason(machine(P100)) == (
        "GPU Tesla P100-PCIE-16GB (compute 6.0) has no FP16 tensor cores (compute 7.0+, Volta "
        "or later); FP16 would gain little")
    reason = fp16_gpu_reason(machine(SILENT))
    assert reason is not None and "did not report its compute capability" in reason


def test_provider_reason_names_what_is_missing_and_the_fix() -> None:
    assert provider_reason("cuda", ALL_GPU) is None
    assert provider_reason("tensorrt", ALL_GPU) is None
    reason = provider_reason("tensorrt", ["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert reason is not None
    assert reason.startswith("this onnxruntime has no TensorrtExecutionProvider (it has "
                             "CUDAExecutionProvider, CPUExecutionProvider); ")
    assert "infertune[gpu]" in reason


def test_session_providers_put_the_gpu_first_and_tensorrt_falls_back_to_cuda(
        tmp_path: Path) -> None:
    assert session_providers(OrtGpuSettings("cuda", device_id=1)) == [
        ("CUDAExecutionProvider", {"device_id": "1"}), ("CPUExecutionProvider", {})]
    profile = trt_profile(NAMES, [4, 8], max_length=32, max_batch=8, opt_batch=2)
    plan = session_providers(OrtGpuSettings("tensorrt", profile=profile), cache_dir=tmp_path)
    assert [name for name, _ in plan] == ALL_GPU
    assert plan[0][1] == {
        "device_id": "0", "trt_fp16_enable": "True", "trt_layer_norm_fp32_fallback": "True",
        "trt_engine_cache_enable": "True",
        "trt_engine_cache_path": str(tmp_path), "trt_timing_cache_enable": "True",
        "trt_timing_cache_path": str(tmp_path),
        "trt_profile_min_shapes": "input_ids:1x1,attention_mask:1x1",
        "trt_profile_opt_shapes": "input_ids:2x8,attention_mask:2x8",
        "trt_profile_max_shapes": "input_ids:8x32,attention_mask:8x32"}
    uncached = session_providers(OrtGpuSettings("tensorrt", engine_cache=False, fp16=False))
    assert uncached[0][1] == {"device_id": "0", "trt_fp16_enable": "False"}


def test_trt_profile_opt_is_the_expected_longest_of_a_batch() -> None:
    lengths = list(range(1, 21))  # 1..20 tokens, one of each
    profile = trt_profile(NAMES, lengths, max_length=64, max_batch=32, opt_batch=4)
    # the 4/5 quantile of 20 lengths is the 16th: 16 tokens
    assert profile.opt_shapes == {"input_ids": [4, 16], "attention_mask": [4, 16]}
    assert profile.min_shapes == {"input_ids": [1, 1], "attention_mask": [1, 1]}
    assert profile.max_shapes == {"input_ids": [32, 64], "attention_mask": [32, 64]}
    assert profile.traffic == {"n": 20, "p50": 10, "p95": 19, "max": 20}
    assert profile.max_batch == 32
    # padded as the preprocessing pads (buckets), and never past max_length
    bucketed = trt_profile(NAMES, lengths, max_length=64, opt_batch=4,
                           padded_length=lambda n: 32 if n > 16 else 16)
    assert bucketed.opt_shapes["input_ids"] == [4, 16]
    capped = trt_profile(NAMES, [100, 200, 300], max_length=128, opt_batch=1)
    assert capped.opt_shapes["input_ids"] == [1, 128]
    assert capped.traffic["max"] == 128


def test_trt_profile_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="token lengths"):
        trt_profile(NAMES, [], max_length=64)
    with pytest.raises(ValueError, match="opt_batch must lie in"):
        trt_profile(NAMES, [3], max_length=64, max_batch=8, opt_batch=16)


def test_gpu_settings_round_trip_through_the_manifest() -> None:
    from infertune.models.variant import Manifest

    profile = trt_profile(NAMES, [5, 9], max_length=16, max_batch=4, opt_batch=2)
    manifest = Manifest(id="v", runtime="onnxruntime", precision="fp16", kind="text",
                        task="embedding", model_file="model.onnx",
                        gpu=OrtGpuSettings("tensorrt", profile=profile))
    back = Manifest.from_dict(manifest.to_dict())
    assert back == manifest and isinstance(back.gpu, OrtGpuSettings)
    assert isinstance(back.gpu.profile, TrtProfile) and back.on_gpu()
    assert not Manifest.from_dict({**manifest.to_dict(), "gpu": None}).on_gpu()


class FakeSession:
    """Stands for an InferenceSession: the providers it says it opened on."""

    def __init__(self, opened_on: list[str]) -> None:
        self.opened_on = opened_on
        self.asked: list[Any] = []

    def get_providers(self) -> list[str]:
        return self.opened_on

    def get_inputs(self) -> list[Any]:
        return [SimpleNamespace(name="x", type="tensor(float)")]

    def get_outputs(self) -> list[Any]:
        return [SimpleNamespace(name="y")]


def _factory(session: FakeSession) -> Any:
    def make(**kwargs: Any) -> FakeSession:
        session.asked.append(kwargs["providers"])
        return session
    return make


def test_a_session_that_fell_back_to_the_cpu_is_refused() -> None:
    session = FakeSession(["CPUExecutionProvider"])  # what onnxruntime does when CUDA fails
    with pytest.raises(ModelLoadError) as caught:
        OrtGpuRunner.open_gpu("m.onnx", OrtGpuSettings("cuda"), available=ALL_GPU,
                              session_factory=_factory(session), preload=lambda: None)
    assert str(caught.value).startswith(
        "m.onnx: onnxruntime opened this GPU variant on CPUExecutionProvider, not "
        "CUDAExecutionProvider")
    assert session.asked == [[("CUDAExecutionProvider", {"device_id": "0"}),
                              ("CPUExecutionProvider", {})]]


def test_a_missing_provider_is_refused_before_any_session_opens() -> None:
    session = FakeSession(["CUDAExecutionProvider"])
    with pytest.raises(ModelLoadError, match="has no TensorrtExecutionProvider"):
        OrtGpuRunner.open_gpu("m.onnx", OrtGpuSettings("tensorrt"),
                              available=["CUDAExecutionProvider", "CPUExecutionProvider"],
                              session_factory=_factory(session), preload=lambda: None)
    assert session.asked == []


def test_the_gpu_provider_opens_and_the_runner_binds_outputs_on_cuda() -> None:
    session = FakeSession(["TensorrtExecutionProvider", "CUDAExecutionProvider"])
    preloaded: list[bool] = []
    runner = OrtGpuRunner.open_gpu("m.onnx", OrtGpuSettings("tensorrt", engine_cache=False),
                                   available=ALL_GPU, session_factory=_factory(session),
                                   preload=lambda: preloaded.append(True))
    assert preloaded == [True]
    assert runner.bind_device == "cuda" and runner.precision == "fp16"
    assert [name for name, _ in session.asked[0]] == ALL_GPU


def test_an_untyped_session_error_becomes_a_one_line_load_error() -> None:
    def boom(**kwargs: Any) -> Any:
        raise RuntimeError("TensorRT EP failed to create engine from network\nmore detail")

    with pytest.raises(ModelLoadError) as caught:
        OrtGpuRunner.open_gpu("m.onnx", OrtGpuSettings("tensorrt"), available=ALL_GPU,
                              session_factory=boom, preload=lambda: None)
    assert str(caught.value) == (
        "m.onnx: onnxruntime cannot open it on TensorrtExecutionProvider (RuntimeError: "
        "TensorRT EP failed to create engine from network)")


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_mlp(tmp_path_factory.mktemp("mlp") / "model.onnx")


def test_io_binding_on_the_cpu_stand_in_gives_the_plain_session_s_outputs(mlp: Path) -> None:
    x = np.random.default_rng(1).standard_normal((5, 16)).astype(np.float32)
    plain = OrtRunner.open(str(mlp))({"x": x})
    bound = OrtGpuRunner.open_gpu(str(mlp), OrtGpuSettings("cuda"), precision="fp32",
                                  stand_in_cpu=True)
    assert bound.bind_device == "cpu" and bound.session.get_providers() == [
        "CPUExecutionProvider"]
    np.testing.assert_allclose(bound({"x": x}), plain, rtol=1e-6, atol=1e-6)
    # reopen keeps the GPU settings and the stand-in
    again = bound.reopen(intra_op_threads=1)
    assert isinstance(again, OrtGpuRunner) and again.bind_device == "cpu"
    assert again.settings == bound.settings


def test_batches_beyond_the_profile_run_in_profile_sized_chunks(mlp: Path) -> None:
    x = np.random.default_rng(2).standard_normal((5, 16)).astype(np.float32)
    profile = TrtProfile({"x": [1, 16]}, {"x": [2, 16]}, {"x": [2, 16]})
    runner = OrtGpuRunner.open_gpu(str(mlp), OrtGpuSettings("tensorrt", profile=profile),
                                   precision="fp32", stand_in_cpu=True)
    seen: list[int] = []
    run = runner._run
    runner._run = lambda feeds: seen.append(len(feeds["x"])) or run(feeds)  # type: ignore
    out = runner({"x": x})
    assert seen == [2, 2, 1]
    np.testing.assert_allclose(out, OrtRunner.open(str(mlp))({"x": x}), rtol=1e-6, atol=1e-6)


def test_doctor_s_fp16_verdict_follows_the_same_capability_rule() -> None:
    from infertune.hardware import applicability

    def fp16(*gpus: GpuInfo) -> tuple[bool, str]:
        found = next(a for a in applicability(machine(*gpus)) if a.family == "fp16")
        return found.applicable, found.reason

    assert fp16(T4) == (True, "GPU Tesla T4 (compute 7.5) has FP16 tensor cores")
    assert fp16(P100) == (False, "GPU Tesla P100-PCIE-16GB: compute 6.0: no FP16 tensor cores "
                                 "(needs 7.0+)")
    assert fp16(SILENT) == (False, "GPU Some GPU: its compute capability was not reported")
