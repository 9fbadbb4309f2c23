"""Hardware detection on this machine, applicability on simulated machines, cgroup parsing."""

from __future__ import annotations

import json
import os
import types
from pathlib import Path

import pytest
from cpu_profiles import EXPECTED_FLAGS, PROFILES, profile_hardware

from infertune import hardware
from infertune.errors import ConfigError
from infertune.hardware import FAMILIES, GpuInfo, HardwareInfo, applicability, detect

CPUINFO_X86 = """processor\t: 0
model name\t: Fake Xeon
flags\t\t: fpu sse2 avx2 avx512f avx512_vnni
"""
CPUINFO_ARM = """processor\t: 0
Features\t: fp asimd evtstrm asimddp bf16 i8mm
"""


def _verdicts(hw: HardwareInfo) -> dict[str, hardware.Applicability]:
    return {a.family: a for a in applicability(hw)}


def _machine(**changes: object) -> HardwareInfo:
    base = {"cpu_model": "sim", "logical_cores": 4, "flags": ["avx2", "avx512f"],
            "libraries": {"torch": "2.13.0", "onnxruntime": "1.32.0", "onnx": "1.23.2"},
            "cxx_compiler": "/usr/bin/g++"}
    return HardwareInfo.from_dict({**base, **changes})


def _first_cpu_field(key: str) -> set[str]:
    """A field of the first CPU in the real /proc/cpuinfo, read independently of detect()."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        name, _, value = line.partition(":")
        if name.strip() == key:
            return set(value.split())
    return set()


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="needs Linux's /proc/cpuinfo")
def test_detect_agrees_with_this_machines_proc_and_cgroup_files() -> None:
    hw = detect(with_gpus=False)
    x86, arm = _first_cpu_field("flags"), _first_cpu_field("Features")
    expected = {f for f in hardware.X86_FLAGS if f in x86}
    expected |= {ours for theirs, ours in hardware.ARM_FEATURES.items() if theirs in arm}
    assert hw.flags == sorted(expected)
    assert hw.logical_cores == len(os.sched_getaffinity(0))
    cpu_max = Path("/sys/fs/cgroup/cpu.max")
    if cpu_max.exists() and cpu_max.read_text().split()[0] != "max":
        quota, period = map(int, cpu_max.read_text().split())
        assert hw.cpu_quota == pytest.approx(quota / period, abs=1e-3)
    assert 1 <= hw.effective_cores <= hw.logical_cores
    mem_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal:"))
    assert hw.memory_gb == pytest.approx(mem_kb / 2**20, abs=0.02)
    assert {"numpy", "torch", "onnxruntime"} <= set(hw.libraries)


@pytest.mark.parametrize("name", PROFILES)
def test_detect_reads_each_machines_files(name: str, tmp_path: Path) -> None:
    hw = profile_hardware(name, tmp_path, cores=8, quota_cpus=1.5)
    assert hw.flags == EXPECTED_FLAGS[name]
    assert (hw.logical_cores, hw.cpu_quota, hw.effective_cores) == (8, 1.5, 2)
    assert HardwareInfo.from_dict(hw.to_dict()) == hw


# family -> (applicable, a phrase its reason must hold), per machine
VERDICTS = {
    "avx2": {"int8-dynamic": (True, "speedup over fp32 is smaller"),
             "bf16": (False, "no avx512_bf16"), "fp16": (False, "no GPU")},
    "zen4": {"int8-dynamic": (True, "avx512_vnni present"),
             "bf16": (True, "avx512_bf16 present"), "fp16": (False, "no GPU")},
    "sapphire_rapids": {"int8-dynamic": (True, "amx_int8, avx512_vnni, avx_vnni present"),
                        "bf16": (True, "amx_bf16, avx512_bf16 present"),
                        "fp16": (False, "no GPU")},
    "graviton3": {"int8-dynamic": (True, "i8mm, asimd_dotprod present"),
                  "bf16": (True, "arm_bf16 present"), "fp16": (False, "no GPU")},
}


@pytest.mark.parametrize("name", PROFILES)
def test_applicability_on_each_machine(name: str, tmp_path: Path) -> None:
    verdicts = _verdicts(profile_hardware(name, tmp_path))
    for family, (applicable, phrase) in VERDICTS[name].items():
        assert verdicts[family].applicable is applicable, family
        assert phrase in verdicts[family].reason, (family, verdicts[family].reason)
    assert verdicts["threads"].applicable and "4 usable cores" in verdicts["threads"].reason


@pytest.mark.parametrize("name, schemes", [
    ("avx2", ["U8S8 reduce_range", "U8U8"]),  # full-range U8S8 saturates without VNNI
    ("zen4", ["U8S8"]),
    ("sapphire_rapids", ["U8S8"]),
    ("graviton3", ["S8S8"]),
])
def test_int8_schemes_offered_on_each_machine(name: str, schemes: list[str],
                                              tmp_path: Path) -> None:
    from infertune.optimize.passes._onnx import int8_scheme, int8_schemes

    hw = profile_hardware(name, tmp_path)
    assert [s.label for s in int8_schemes(hw)] == schemes
    assert int8_scheme(hw).label == schemes[0]


@pytest.mark.parametrize("cores, quota, threads_applicable", [(1, None, False), (4, 0.5, False),
                                                               (4, 1.5, True), (16, None, True)])
def test_thread_sizing_follows_cores_and_quota(cores: int, quota: float | None,
                                                threads_applicable: bool, tmp_path: Path) -> None:
    hw = profile_hardware("zen4", tmp_path, cores=cores, quota_cpus=quota)
    assert hw.effective_cores == hardware.effective_cores(cores, quota)
    assert _verdicts(hw)["threads"].applicable is threads_applicable


def test_every_family_gets_one_verdict_in_order() -> None:
    assert [a.family for a in applicability(_machine())] == list(FAMILIES)


def test_no_bf16_flags_and_no_gpu_means_bf16_and_fp16_not_applicable() -> None:
    verdicts = _verdicts(_machine())
    assert not verdicts["bf16"].applicable
    assert "avx512_bf16" in verdicts["bf16"].reason
    assert not verdicts["fp16"].applicable
    assert "no GPU" in verdicts["fp16"].reason


def test_int8_without_vnni_applies_with_smaller_speedup() -> None:
    verdict = _verdicts(_machine())["int8-dynamic"]
    assert verdict.applicable
    assert "smaller" in verdict.reason
    assert "calibration" in _verdicts(_machine())["int8-static"].reason


def test_amx_enables_bf16() -> None:
    assert _verdicts(_machine(flags=["amx_bf16", "amx_tile"]))["bf16"].applicable


def test_gpu_capability_decides_bf16_and_gpu_enables_fp16() -> None:
    t4 = GpuInfo(name="Tesla T4", memory_gb=15.0, driver="550", compute_capability="7.5")
    a100 = GpuInfo(name="A100", memory_gb=80.0, driver="550", compute_capability="8.0")
    on_t4 = _verdicts(_machine(gpus=[t4.to_dict()]))
    assert on_t4["fp16"].applicable
    assert not on_t4["bf16"].applicable and "8.0" in on_t4["bf16"].reason
    assert _verdicts(_machine(gpus=[a100.to_dict()]))["bf16"].applicable


def test_library_and_compiler_gates() -> None:
    bare = _verdicts(_machine(libraries={"numpy": "2.4.6"}, cxx_compiler=None))
    assert not bare["onnxruntime-fusion"].applicable
    assert not bare["torch-compile"].applicable
    assert not bare["int8-dynamic"].applicable
    no_cxx = _verdicts(_machine(cxx_compiler=None))
    assert not no_cxx["torch-compile"].applicable and "g++" in no_cxx["torch-compile"].reason


def test_one_core_quota_means_threads_not_applicable() -> None:
    hw = _machine(cpu_quota=0.5)
    assert hw.effective_cores == 1
    assert not _verdicts(hw)["threads"].applicable


def test_effective_cores_rounds_quota_up_and_caps_at_logical() -> None:
    assert hardware.effective_cores(8, 1.5) == 2
    assert hardware.effective_cores(2, 4.0) == 2
    assert hardware.effective_cores(6, None) == 6


def test_round_trip_through_json() -> None:
    hw = _machine(cpu_quota=2.5, gpus=[{"name": "T4", "memory_gb": 15.0, "driver": "550"}])
    data = json.loads(json.dumps(hw.to_dict()))
    assert data["schema"] == "infertune.hardware/v1"
    assert [a["family"] for a in data["applicability"]] == list(FAMILIES)
    assert HardwareInfo.from_dict(data) == hw
    real = detect()
    assert HardwareInfo.from_dict(json.loads(json.dumps(real.to_dict()))) == real


def test_from_dict_rejects_other_schema_and_unknown_fields() -> None:
    with pytest.raises(ConfigError, match="v1"):
        HardwareInfo.from_dict({"schema": "infertune.hardware/v9", "cpu_model": "x",
                                "logical_cores": 1})
    with pytest.raises(ConfigError, match="flag"):
        HardwareInfo.from_dict({"cpu_model": "x", "logical_cores": 1, "flag": ["avx2"]})
    with pytest.raises(ConfigError, match="flags must be a list"):
        HardwareInfo.from_dict({"cpu_model": "x", "logical_cores": 1, "flags": "avx512_bf16"})
    with pytest.raises(ConfigError, match="logical_cores"):
        HardwareInfo.from_dict({"cpu_model": "x"})
    with pytest.raises(ConfigError):
        HardwareInfo.from_dict({"cpu_model": "x", "logical_cores": 1, "gpus": [{"name": "T4"}]})


def test_cpu_flags_and_model_from_cpuinfo_text() -> None:
    assert hardware.cpu_flags(CPUINFO_X86) == ["avx2", "avx512_vnni", "avx512f"]
    assert hardware.cpu_model(CPUINFO_X86) == "Fake Xeon"
    assert hardware.cpu_flags(CPUINFO_ARM) == ["arm_bf16", "asimd_dotprod", "i8mm", "neon"]


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def test_cgroup_v2_quota(tmp_path: Path) -> None:
    _write(tmp_path, "cpu.max", "150000 100000")
    assert hardware.cgroup_cpu_quota(tmp_path) == 1.5
    _write(tmp_path, "cpu.max", "max 100000")
    assert hardware.cgroup_cpu_quota(tmp_path) is None


def test_cgroup_v2_own_group_wins_over_root(tmp_path: Path) -> None:
    _write(tmp_path, "cpu.max", "max 100000")
    _write(tmp_path, "kubepods/pod1/cpu.max", "50000 100000")
    assert hardware.cgroup_cpu_quota(tmp_path, "0::/kubepods/pod1\n") == 0.5


def test_cgroup_v1_quota_and_unlimited(tmp_path: Path) -> None:
    _write(tmp_path, "cpu/cpu.cfs_quota_us", "200000")
    _write(tmp_path, "cpu/cpu.cfs_period_us", "100000")
    assert hardware.cgroup_cpu_quota(tmp_path, "1:cpu:/\n") == 2.0
    _write(tmp_path, "cpu/cpu.cfs_quota_us", "-1")
    assert hardware.cgroup_cpu_quota(tmp_path) is None
    assert hardware.cgroup_cpu_quota(tmp_path / "absent") is None


def test_cgroup_memory_limits(tmp_path: Path) -> None:
    _write(tmp_path, "memory/memory.limit_in_bytes", str(4 * 2**30))
    assert hardware.cgroup_memory_limit_gb(tmp_path) == 4.0
    _write(tmp_path, "memory/memory.limit_in_bytes", "9223372036854771712")
    assert hardware.cgroup_memory_limit_gb(tmp_path) is None
    _write(tmp_path, "memory.max", str(2 * 2**30))
    assert hardware.cgroup_memory_limit_gb(tmp_path) == 2.0


def test_detect_with_fake_roots(tmp_path: Path) -> None:
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    _write(proc, "cpuinfo", CPUINFO_X86)
    _write(proc, "self/cgroup", "0::/\n")
    _write(cgroup, "cpu.max", "100000 100000")
    hw = detect(proc_root=proc, cgroup_root=cgroup, with_gpus=False)
    assert hw.cpu_model == "Fake Xeon"
    assert hw.flags == ["avx2", "avx512_vnni", "avx512f"]
    assert hw.cpu_quota == 1.0 and hw.effective_cores == 1
    assert hw.gpus == []


class _NVMLError(Exception):
    pass


def _fake_nvml(devices: list[tuple[bytes, int, tuple[int, int]]], init_fails: bool) -> object:
    """A stand-in for pynvml: names as bytes (as older bindings return them), memory in bytes."""

    def init() -> None:
        if init_fails:
            raise _NVMLError("NVML Shared Library Not Found")

    fake = types.SimpleNamespace(NVMLError=_NVMLError, nvmlInit=init, nvmlShutdown=lambda: None)
    fake.nvmlSystemGetDriverVersion = lambda: b"550.54"
    fake.nvmlDeviceGetCount = lambda: len(devices)
    fake.nvmlDeviceGetHandleByIndex = lambda i: i
    fake.nvmlDeviceGetName = lambda h: devices[h][0]
    fake.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=devices[h][1])
    fake.nvmlDeviceGetCudaComputeCapability = lambda h: devices[h][2]
    return fake


def test_nvml_without_driver_means_no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hardware, "pynvml", _fake_nvml([], init_fails=True))
    assert hardware.nvidia_gpus() == []


def test_nvml_devices_are_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake_nvml([(b"NVIDIA H200", 141 * 2**30, (9, 0))], init_fails=False)
    monkeypatch.setattr(hardware, "pynvml", fake)
    assert hardware.nvidia_gpus() == [
        GpuInfo(name="NVIDIA H200", memory_gb=141.0, driver="550.54", compute_capability="9.0")]


@pytest.mark.parametrize("name, scheme, risky", [
    ("avx2", ("uint8", "int8", False), True),   # a VNNI-built variant served without VNNI
    ("avx2", ("uint8", "int8", True), False),   # 7-bit weights: no saturation
    ("avx2", ("uint8", "uint8", False), False),
    ("zen4", ("uint8", "int8", False), False),
    ("sapphire_rapids", ("uint8", "int8", False), False),
    ("graviton3", ("int8", "int8", False), False),
])
def test_int8_saturation_risk_of_a_scheme_on_each_machine(
        name: str, scheme: tuple[str, str, bool], risky: bool, tmp_path: Path) -> None:
    risk = hardware.int8_saturation_risk(profile_hardware(name, tmp_path), *scheme)
    assert (risk is not None) is risky
    if risk:
        assert "rebuild it here" in risk and "\n" not in risk
