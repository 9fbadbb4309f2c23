"""HardwareInfo, GpuInfo and Applicability round-trip through JSON by the one serialisation
(Serial), and write exactly the dict the hand-written to_dict wrote before (the OLD_* literals
were captured by running that code on these instances), so files written then still load."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infertune.hardware import Applicability, GpuInfo, HardwareInfo

HARDWARE = HardwareInfo(
    cpu_model="Fake Xeon",
    logical_cores=8,
    cpu_quota=3.5,
    effective_cores=0,
    memory_gb=32.0,
    memory_limit_gb=16.0,
    flags=["avx2", "avx512f", "avx512_vnni"],
    gpus=[GpuInfo("T4", 15.0, "550.1", "7.5"), GpuInfo("X", 8.0, "1")],
    libraries={"onnxruntime": "1.20", "torch": "2.5"},
    python="3.11.9",
    platform="Linux",
    arch="x86_64",
    cxx_compiler="g++",
)
APPLICABILITY = Applicability("bf16", False, "no avx512_bf16")

OLD_HARDWARE = {
    "schema": "infertune.hardware/v1",
    "cpu_model": "Fake Xeon",
    "logical_cores": 8,
    "cpu_quota": 3.5,
    "effective_cores": 4,
    "memory_gb": 32.0,
    "memory_limit_gb": 16.0,
    "flags": ["avx2", "avx512f", "avx512_vnni"],
    "gpus": [
        {"name": "T4", "memory_gb": 15.0, "driver": "550.1", "compute_capability": "7.5"},
        {"name": "X", "memory_gb": 8.0, "driver": "1", "compute_capability": None},
    ],
    "libraries": {"onnxruntime": "1.20", "torch": "2.5"},
    "python": "3.11.9",
    "platform": "Linux",
    "arch": "x86_64",
    "cxx_compiler": "g++",
    "applicability": [
        {
            "family": "onnxruntime-fusion",
            "applicable": False,
            "reason": "needs onnx; install the onnx extra",
        },
        {
            "family": "int8-dynamic",
            "applicable": True,
            "reason": "avx512_vnni present: int8 dot products run natively",
        },
        {
            "family": "int8-static",
            "applicable": True,
            "reason": "avx512_vnni present: int8 dot products run natively; needs a "
            "few hundred calibration examples",
        },
        {
            "family": "bf16",
            "applicable": False,
            "reason": "GPU T4 lacks native bf16 (needs compute 8.0+) and the CPU has "
            "no avx512_bf16 or AMX; use fp16 on the GPU instead",
        },
        {
            "family": "fp16",
            "applicable": True,
            "reason": "GPU T4 (compute 7.5) has FP16 tensor cores",
        },
        {
            "family": "torch-compile",
            "applicable": True,
            "reason": "torch 2.5; the first call compiles (seconds), so measure cold start too",
        },
        {
            "family": "threads",
            "applicable": True,
            "reason": "4 usable cores (8 logical, cgroup quota 3.5 CPUs): "
            "intra/inter-op thread counts decide latency versus throughput",
        },
        {
            "family": "input-trimming",
            "applicable": True,
            "reason": "hardware-independent: pays off when inputs are padded well "
            "beyond their real token length",
        },
        {
            "family": "dynamic-batching",
            "applicable": True,
            "reason": "hardware-independent: pays off when requests arrive faster than "
            "one model call finishes",
        },
        {
            "family": "caching",
            "applicable": True,
            "reason": "hardware-independent: pays off in proportion to repeated requests",
        },
    ],
}
OLD_APPLICABILITY = {"family": "bf16", "applicable": False, "reason": "no avx512_bf16"}

CASES: list[Any] = [HARDWARE, HARDWARE.gpus[0], HARDWARE.gpus[1], APPLICABILITY]


@pytest.mark.parametrize("obj", CASES, ids=lambda o: type(o).__name__)
def test_round_trip_through_json(obj: Any) -> None:
    assert type(obj).from_dict(json.loads(json.dumps(obj.to_dict()))) == obj


OLD: list[tuple[Any, dict[str, Any]]] = [
    (HARDWARE, OLD_HARDWARE),
    (APPLICABILITY, OLD_APPLICABILITY),
]


@pytest.mark.parametrize(("obj", "old"), OLD, ids=lambda o: type(o).__name__)
def test_writes_and_reads_what_the_hand_written_code_wrote(obj: Any, old: dict[str, Any]) -> None:
    assert obj.to_dict() == old
    assert type(obj).from_dict(old) == obj
