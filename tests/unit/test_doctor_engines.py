"""`infertune doctor`'s engines and precisions (optimize/passes/registry.engines_on), judged on
described machines, never this one: what applies and why, and what it would take."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cpu_profiles import profile_hardware

from infertune.cli import main
from infertune.hardware import GpuInfo, HardwareInfo
from infertune.optimize.passes.registry import EngineVerdict, engines_on


def by_engine(hw: HardwareInfo) -> dict[tuple[str, str], EngineVerdict]:
    return {(v.engine, v.device): v for v in engines_on(hw)}


@pytest.fixture(scope="module")
def cpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HardwareInfo]:
    root = tmp_path_factory.mktemp("cpus")
    found = {n: profile_hardware(n, root, cores=2) for n in ("avx2", "zen4", "sapphire_rapids")}
    for hw in found.values():  # the libraries the engines list, as a full install has them
        hw.libraries = {lib: "1" for lib in ("torch", "transformers", "onnx", "onnxruntime",
                                             "openvino", "nncf")}
    return found


def test_openvino_bf16_on_each_cpu(cpus: dict[str, HardwareInfo]) -> None:
    avx2 = by_engine(cpus["avx2"])[("OpenVINO bf16", "cpu")]
    assert not avx2.applies and avx2.why == (
        "needs AMX (amx_bf16) or avx512_bf16; this CPU (AMD EPYC 7B12) has none of amx_bf16, "
        "avx512_bf16")
    zen4 = by_engine(cpus["zen4"])[("OpenVINO bf16", "cpu")]
    assert zen4.applies and zen4.why.startswith("avx512_bf16 present; ")
    spr = by_engine(cpus["sapphire_rapids"])[("OpenVINO bf16", "cpu")]
    assert spr.applies and spr.why.startswith("amx_bf16, avx512_bf16 present; ")
    assert spr.passes == ("openvino_bf16",)
    # fp32 engines need no special CPU
    for hw in cpus.values():
        assert by_engine(hw)[("OpenVINO fp32", "cpu")].applies
        assert by_engine(hw)[("ONNX Runtime int8", "cpu")].applies


def test_gpu_engines_need_the_gpu(cpus: dict[str, HardwareInfo]) -> None:
    fp16 = by_engine(cpus["sapphire_rapids"])[("PyTorch fp16", "gpu")]
    assert not fp16.applies and fp16.why == (
        "needs an NVIDIA GPU of compute capability 7+; this machine has no NVIDIA GPU")
    t4 = HardwareInfo("AMD EPYC 7B12", 4, flags=["avx2"], arch="x86_64",
                      gpus=[GpuInfo("Tesla T4", 15.0, "550.54", "7.5")],
                      libraries=cpus["avx2"].libraries)
    on_t4 = by_engine(t4)
    assert on_t4[("PyTorch fp16", "gpu")].applies
    assert on_t4[("PyTorch fp16", "gpu")].why.startswith("GPU Tesla T4 (compute 7.5); ")
    assert not on_t4[("OpenVINO bf16", "cpu")].applies  # the T4 does not help OpenVINO


def test_a_missing_library_is_what_it_would_take(cpus: dict[str, HardwareInfo]) -> None:
    hw = cpus["sapphire_rapids"]
    bare = HardwareInfo(hw.cpu_model, 2, flags=hw.flags, arch="x86_64",
                        libraries={"onnx": "1", "onnxruntime": "1"})
    ov = by_engine(bare)[("OpenVINO bf16", "cpu")]
    assert not ov.applies and ov.why == "needs openvino installed (not found here)"
    assert by_engine(bare)[("ONNX Runtime fp32", "cpu")].applies


def test_doctor_prints_the_engines_and_round_trips_its_json(
        cpus: dict[str, HardwareInfo], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    path = tmp_path / "hardware.json"
    path.write_text(json.dumps(cpus["avx2"].to_dict()))
    assert main(["doctor", "--hardware", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Engines and precisions infertune can build here" in out
    assert "needs AMX (amx_bf16) or avx512_bf16" in out
    assert main(["doctor", "--json", "--hardware", str(path)]) == 0
    data = json.loads(capsys.readouterr().out)
    engines = {(e["engine"], e["device"]): e for e in data["engines"]}
    assert engines[("OpenVINO bf16", "cpu")]["applies"] is False
    assert engines[("OpenVINO fp32", "cpu")]["applies"] is True
    # doctor --json's output is itself a hardware file doctor reads back
    again = tmp_path / "again.json"
    again.write_text(json.dumps(data))
    assert main(["doctor", "--json", "--hardware", str(again)]) == 0
    assert json.loads(capsys.readouterr().out)["engines"] == data["engines"]
