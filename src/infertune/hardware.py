"""What machine this is: cores, the cgroup CPU quota, memory, the CPU flags that decide which
optimizations pay off, GPUs and library versions. ``detect()`` reads it; ``applicability()``
says, per optimization family, whether it applies here and why.

``HardwareInfo.to_dict()`` is the stable ``hardware.json`` schema ("infertune.hardware/v1");
``HardwareInfo.from_dict()`` reads it back, so tests and ``advise`` can simulate other machines.
The file roots (``/proc``, ``/sys/fs/cgroup``) are parameters so tests can point them at fakes.
"""

from __future__ import annotations

import math
import os
import platform
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil
import pynvml

from infertune.errors import ConfigError, DataError
from infertune.serial import Serial

SCHEMA = "infertune.hardware/v1"

# x86 flags as /proc/cpuinfo spells them; ARM features are mapped to names of our own below.
X86_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile",
             "amx_int8", "amx_bf16", "amx_fp16")
ARM_FEATURES = {"asimd": "neon", "neon": "neon", "asimddp": "asimd_dotprod", "i8mm": "i8mm",
                "bf16": "arm_bf16"}
LIBRARIES = ("torch", "onnxruntime", "transformers", "numpy", "onnx", "openvino", "nncf")
# INT8 dot products that cannot saturate with U8S8 operands at full 8-bit range
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
_NO_LIMIT_BYTES = 1 << 60  # cgroup v1 writes "no limit" as a number near 2**63


@dataclass
class GpuInfo(Serial):
    name: str
    memory_gb: float
    driver: str
    compute_capability: str | None = None  # "8.0"; None when the driver did not say


@dataclass
class HardwareInfo(Serial):
    DERIVED = ("schema", "applicability")  # the verdicts are recomputed on read

    cpu_model: str
    logical_cores: int  # CPUs this process may run on (sched_getaffinity)
    cpu_quota: float | None = None  # cgroup CPU quota in CPUs; None when unlimited
    effective_cores: int = 0  # min(logical_cores, ceil(cpu_quota)); 0 means "same as logical"
    memory_gb: float = 0.0  # physical memory (MemTotal)
    memory_limit_gb: float | None = None  # cgroup memory limit; None when unlimited
    flags: list[str] = field(default_factory=list)
    gpus: list[GpuInfo] = field(default_factory=list)
    libraries: dict[str, str] = field(default_factory=dict)  # only installed ones
    python: str = ""
    platform: str = ""
    arch: str = ""
    cxx_compiler: str | None = None  # torch.compile's inductor needs one on CPU

    def __post_init__(self) -> None:
        if self.effective_cores <= 0:
            self.effective_cores = effective_cores(self.logical_cores, self.cpu_quota)

    def has(self, flag: str) -> bool:
        return flag in self.flags

    @property
    def schema(self) -> str:
        return SCHEMA

    @property
    def applicability(self) -> list[Applicability]:
        return applicability(self)

    # why hand-written: hardware.json is also written by hand (advise simulates other machines),
    # so unknown fields and wrong types are refused with a ConfigError, not ignored
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HardwareInfo:
        data = dict(data)
        schema = data.pop("schema", SCHEMA)
        if schema != SCHEMA:
            raise ConfigError(f"hardware schema {schema!r} is not supported; expected {SCHEMA!r}")
        data.pop("applicability", None)  # derived from the rest, recomputed on read
        data.pop("engines", None)  # doctor --json's engine verdicts, derived the same way
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"hardware: unknown field(s) {unknown}; allowed: {sorted(known)}")
        for name, kind in (("flags", list), ("gpus", list), ("libraries", dict)):
            if not isinstance(data.get(name, kind()), kind):
                raise ConfigError(f"hardware: {name} must be a {kind.__name__}, "
                                  f"got {type(data[name]).__name__}")
        try:
            data["gpus"] = [GpuInfo.from_dict(g) for g in data.get("gpus", [])]
            return cls(**data)
        except (TypeError, DataError) as exc:  # a missing required field or a bad GPU entry
            raise ConfigError(
                f"hardware: {exc}; see `infertune doctor --json` for the schema"
            ) from exc


@dataclass
class Applicability(Serial):
    family: str
    applicable: bool
    reason: str


FAMILIES = ("onnxruntime-fusion", "int8-dynamic", "int8-static", "bf16", "fp16",
            "torch-compile", "threads", "input-trimming", "dynamic-batching", "caching")


# ---------------------------------------------------------------------------- detection


def detect(proc_root: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup"),
           with_gpus: bool = True, *, arch: str | None = None,
           logical_cores: int | None = None) -> HardwareInfo:
    """Describe this machine. Nothing here raises for a missing file: an absent fact is empty.
    ``arch`` and ``logical_cores`` override what the running process sees (platform.machine(),
    its CPU affinity), so tests can describe another machine from its /proc and cgroup files."""
    cpuinfo = _read(proc_root / "cpuinfo") or ""
    cgroups = _read(proc_root / "self" / "cgroup") or ""
    logical = logical_cores or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                else (os.cpu_count() or 1))
    quota = cgroup_cpu_quota(cgroup_root, cgroups)
    return HardwareInfo(
        cpu_model=cpu_model(cpuinfo),
        logical_cores=logical,
        cpu_quota=quota,
        memory_gb=round(psutil.virtual_memory().total / 2**30, 2),
        memory_limit_gb=cgroup_memory_limit_gb(cgroup_root, cgroups),
        flags=cpu_flags(cpuinfo),
        gpus=nvidia_gpus() if with_gpus else [],
        libraries=library_versions(),
        python=platform.python_version(),
        platform=platform.platform(),
        arch=arch or platform.machine(),
        cxx_compiler=shutil.which("g++") or shutil.which("c++") or shutil.which("clang++"),
    )


def effective_cores(logical: int, quota: float | None) -> int:
    """Cores worth one thread each: a quota of 1.5 CPUs still lets two threads make progress,
    so round up (as loky and the JVM do), but never beyond the cores we may run on."""
    if quota is None:
        return max(1, logical)
    return max(1, min(logical, math.ceil(quota)))


def cpu_model(cpuinfo: str) -> str:
    for key in ("model name", "Hardware", "Processor", "cpu model"):
        value = _cpuinfo_field(cpuinfo, key)
        if value:
            return value
    return platform.processor() or platform.machine() or "unknown"


def cpu_flags(cpuinfo: str) -> list[str]:
    """The flags that matter for optimization choices, sorted, from the first CPU's entry."""
    x86 = set((_cpuinfo_field(cpuinfo, "flags") or "").split())
    arm = set((_cpuinfo_field(cpuinfo, "Features") or "").split())
    found = {f for f in X86_FLAGS if f in x86}
    found |= {ours for theirs, ours in ARM_FEATURES.items() if theirs in arm}
    return sorted(found)


def _cpuinfo_field(cpuinfo: str, key: str) -> str | None:
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() == key:
            return value.strip()
    return None


def cgroup_cpu_quota(root: Path, self_cgroup: str = "") -> float | None:
    """The CPU limit in CPUs from cgroup v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us`` /
    ``cpu.cfs_period_us``; None when there is no limit or no cgroup files."""
    for folder in _cgroup_dirs(root, self_cgroup, v2_marker="cpu.max", v1_name="cpu"):
        v2 = _read(folder / "cpu.max")
        if v2 is not None:
            parts = v2.split()
            if len(parts) == 2 and parts[0] != "max":
                return _ratio(parts[0], parts[1])
            return None
        quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
        if quota is not None and period is not None:
            return _ratio(quota, period)
    return None


def cgroup_memory_limit_gb(root: Path, self_cgroup: str = "") -> float | None:
    for folder in _cgroup_dirs(root, self_cgroup, v2_marker="memory.max", v1_name="memory"):
        raw = _read(folder / "memory.max") or _read(folder / "memory.limit_in_bytes")
        if raw is None:
            continue
        if raw == "max" or not raw.isdigit() or int(raw) >= _NO_LIMIT_BYTES:
            return None
        return round(int(raw) / 2**30, 2)
    return None


def _cgroup_dirs(root: Path, self_cgroup: str, v2_marker: str, v1_name: str) -> list[Path]:
    """Folders to look in, most specific first: this process's own cgroup (from
    /proc/self/cgroup) under v2 then v1, then the roots (inside a container with a cgroup
    namespace, the root is already this process's cgroup)."""
    own: dict[str, str] = {}
    for line in self_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in (parts[1] or "").split(","):
                own[controller] = parts[2].lstrip("/")
    candidates: list[Path] = []
    if "" in own and own[""]:
        candidates.append(root / own[""])
    candidates.append(root)
    v1_dirs = [root / v1_name] + ([root / "cpu,cpuacct"] if v1_name == "cpu" else [])
    for v1_dir in v1_dirs:
        if v1_name in own and own[v1_name]:
            candidates.append(v1_dir / own[v1_name])
        candidates.append(v1_dir)
    seen: list[Path] = []
    for path in candidates:
        if path not in seen and path.is_dir():
            seen.append(path)
    return seen


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return round(q / p, 3) if q > 0 and p > 0 else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def nvidia_gpus() -> list[GpuInfo]:
    """GPUs through NVML; an absent driver or NVML library means no GPUs, never an error."""
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError):
        return []
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total
            try:
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
                capability: str | None = f"{major}.{minor}"
            except pynvml.NVMLError:
                capability = None
            gpus.append(GpuInfo(name=_text(pynvml.nvmlDeviceGetName(handle)),
                                memory_gb=round(memory / 2**30, 2), driver=driver,
                                compute_capability=capability))
        return gpus
    except pynvml.NVMLError:
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


# the same import under another distribution name: onnxruntime-gpu installs `onnxruntime`
DISTRIBUTIONS = {"onnxruntime": ("onnxruntime", "onnxruntime-gpu")}


def library_versions() -> dict[str, str]:
    versions = {}
    for name in LIBRARIES:
        for dist in DISTRIBUTIONS.get(name, (name,)):
            try:
                versions[name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return versions


# ---------------------------------------------------------------------------- applicability


def applicability(hw: HardwareInfo) -> list[Applicability]:
    """One verdict per family in FAMILIES, in that order, each with the reason."""
    return [
        _onnx_fusion(hw), _int8(hw, "int8-dynamic"), _int8(hw, "int8-static"), _bf16(hw),
        _fp16(hw), _torch_compile(hw), _threads(hw),
        Applicability("input-trimming", True,
                      "hardware-independent: pays off when inputs are padded well beyond their "
                      "real token length"),
        Applicability("dynamic-batching", True,
                      "hardware-independent: pays off when requests arrive faster than one "
                      "model call finishes"),
        Applicability("caching", True,
                      "hardware-independent: pays off in proportion to repeated requests"),
    ]


def _missing(hw: HardwareInfo, *names: str) -> list[str]:
    return [n for n in names if n not in hw.libraries]


def _onnx_fusion(hw: HardwareInfo) -> Applicability:
    missing = _missing(hw, "onnx", "onnxruntime")
    if missing:
        return Applicability("onnxruntime-fusion", False,
                             f"needs {' and '.join(missing)}; install the onnx extra")
    return Applicability("onnxruntime-fusion", True,
                         f"onnxruntime {hw.libraries['onnxruntime']}: graph fusions (attention, "
                         "GELU, LayerNorm in transformers) need no special hardware")


def _int8(hw: HardwareInfo, family: str) -> Applicability:
    if not hw.libraries.get("onnxruntime") and not hw.libraries.get("torch"):
        return Applicability(family, False, "needs onnxruntime or torch; install either extra")
    extra = "; needs a few hundred calibration examples" if family == "int8-static" else ""
    fast = [f for f in ("amx_int8", "avx512_vnni", "avx_vnni", "i8mm", "asimd_dotprod")
            if hw.has(f)]
    if fast:
        return Applicability(family, True,
                             f"{', '.join(fast)} present: int8 dot products run natively{extra}")
    return Applicability(family, True,
                         "no VNNI/AMX-int8 or ARM dot-product instructions: it runs, but the "
                         f"speedup over fp32 is smaller{extra}")


def _bf16(hw: HardwareInfo) -> Applicability:
    cpu = [f for f in ("amx_bf16", "avx512_bf16", "arm_bf16") if hw.has(f)]
    if cpu:
        return Applicability("bf16", True, f"{', '.join(cpu)} present: native bf16 on the CPU")
    modern = [g for g in hw.gpus if _capability(g) >= 8.0]
    if modern:
        return Applicability("bf16", True,
                             f"GPU {modern[0].name} (compute {modern[0].compute_capability}) "
                             "has native bf16")
    if hw.gpus:
        return Applicability("bf16", False,
                             f"GPU {hw.gpus[0].name} lacks native bf16 (needs compute 8.0+) and "
                             "the CPU has no avx512_bf16 or AMX; use fp16 on the GPU instead")
    return Applicability("bf16", False,
                         "the CPU has no avx512_bf16 or AMX-bf16 and there is no GPU; bf16 "
                         "would be emulated and slower than fp32")


def _fp16(hw: HardwareInfo) -> Applicability:
    if hw.gpus:  # the same rule as the GPU passes (models/gpu.py fp16_gpu_reason)
        gpu = hw.gpus[0]
        if _capability(gpu) >= 7.0:
            return Applicability("fp16", True, f"GPU {gpu.name} (compute "
                                 f"{gpu.compute_capability}) has FP16 tensor cores")
        why = (f"compute {gpu.compute_capability}: no FP16 tensor cores (needs 7.0+)"
               if gpu.compute_capability else "its compute capability was not reported")
        return Applicability("fp16", False, f"GPU {gpu.name}: {why}")
    if hw.has("amx_fp16"):
        return Applicability("fp16", True, "amx_fp16 present: native fp16 matrix multiply")
    return Applicability("fp16", False,
                         "no GPU: CPUs without AMX-fp16 emulate fp16, slower than fp32")


def _torch_compile(hw: HardwareInfo) -> Applicability:
    if "torch" not in hw.libraries:
        return Applicability("torch-compile", False, "needs torch; install the torch extra")
    if not hw.gpus and not hw.cxx_compiler:
        return Applicability("torch-compile", False,
                             "no C++ compiler: torch.compile's CPU backend needs g++ or clang++ "
                             "(apt-get install g++)")
    return Applicability("torch-compile", True,
                         f"torch {hw.libraries['torch']}; the first call compiles (seconds), "
                         "so measure cold start too")


def _threads(hw: HardwareInfo) -> Applicability:
    cores = hw.effective_cores
    if cores <= 1:
        return Applicability("threads", False,
                             "one usable core: there is no thread count to tune")
    quota = f", cgroup quota {hw.cpu_quota} CPUs" if hw.cpu_quota is not None else ""
    return Applicability("threads", True,
                         f"{cores} usable cores ({hw.logical_cores} logical{quota}): intra/"
                         "inter-op thread counts decide latency versus throughput")


def _capability(gpu: GpuInfo) -> float:
    try:
        return float(gpu.compute_capability or 0)
    except ValueError:
        return 0.0


def int8_saturation_risk(hw: HardwareInfo, activation: str, weight: str,
                         reduce_range: bool) -> str | None:
    """Why an INT8 scheme (chosen on another machine) computes wrong results on this CPU, or
    None. Without VNNI, x86 runs U8S8 on vpmaddubsw, whose 16-bit pair sums saturate when the
    weights use the full 8-bit range: on tests/helpers/onnx_graphs.py's MLP that raised the
    max error from 0.037 to 0.147 on an AVX2-only EPYC."""
    x86 = not hw.arch.startswith(("arm", "aarch")) and "neon" not in hw.flags
    if (x86 and (activation, weight) == ("uint8", "int8") and not reduce_range
            and not any(hw.has(f) for f in VNNI_FLAGS)):
        return ("this INT8 variant uses full-range U8S8 weights, chosen on a CPU with VNNI; "
                "this CPU has no VNNI, where that kernel saturates and loses accuracy; rebuild "
                "it here (infertune optimize) or serve it on a CPU with avx512_vnni/avx_vnni")
    return None
