"""Four machines a user runs infertune on, described by their own /proc/cpuinfo and cgroup
files (flag lists cut to the ones that matter plus neighbours, as the kernel spells them), so
every CPU-dependent decision is tested on each whatever CPU runs the suite:

- ``avx2``: AMD EPYC 7B12 (Zen 2, Rome) — AVX2 only: no AVX-512, no VNNI, no BF16.
- ``zen4``: AMD EPYC 9B14 (Zen 4, Genoa) — AVX-512 with VNNI and BF16 (as Ice Lake and later).
- ``sapphire_rapids``: Intel Xeon Platinum 8481C — AVX-512, VNNI, BF16 and AMX tiles.
- ``graviton3``: AWS Graviton3 (Neoverse V1), ARM64 — NEON, dot product, i8mm, BF16.

``this_cpu()`` is the machine under the suite, for tests whose numbers depend on the kernels
that really run (INT8 saturation differs between AVX2 and VNNI).
"""

from __future__ import annotations

from pathlib import Path

from infertune.hardware import HardwareInfo, detect

_X86_COMMON = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush "
               "mmx fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc "
               "rep_good nopl nonstop_tsc cpuid pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 "
               "movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm abm")
_AVX512 = "avx512f avx512dq avx512cd avx512bw avx512vl avx512ifma avx512vbmi"

CPUINFO = {
    "avx2": ("AMD EPYC 7B12", f"{_X86_COMMON} bmi1 avx2 smep bmi2 rdseed adx smap clflushopt "
                              "clwb sha_ni xsaveopt xsavec xgetbv1 clzero xsaveerptr"),
    "zen4": ("AMD EPYC 9B14", f"{_X86_COMMON} bmi1 avx2 smep bmi2 erms invpcid {_AVX512} "
                              "avx512_bf16 clzero xsaveerptr avx512vbmi2 gfni vaes "
                              "vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq"),
    "sapphire_rapids": ("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz",
                        f"{_X86_COMMON} bmi1 avx2 smep bmi2 erms invpcid {_AVX512} "
                        "avx_vnni avx512_bf16 wbnoinvd arat avx512vbmi2 gfni vaes vpclmulqdq "
                        "avx512_vnni avx512_bitalg avx512_vpopcntdq amx_bf16 avx512_fp16 "
                        "amx_tile amx_int8"),
}
GRAVITON3_CPUINFO = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm \
jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs \
paca pacg dcpodp svei8mm svebf16 i8mm bf16 dgh rng
CPU implementer\t: 0x41
CPU architecture: 8
CPU part\t: 0xd40

"""
PROFILES = ("avx2", "zen4", "sapphire_rapids", "graviton3")
# What detect() must find in each, among the flags infertune decides on.
EXPECTED_FLAGS = {
    "avx2": ["avx2"],
    "zen4": ["avx2", "avx512_bf16", "avx512_vnni", "avx512f"],
    "sapphire_rapids": ["amx_bf16", "amx_int8", "amx_tile", "avx2", "avx512_bf16",
                        "avx512_vnni", "avx512f", "avx_vnni"],
    "graviton3": ["arm_bf16", "asimd_dotprod", "i8mm", "neon"],
}


def _cpuinfo(name: str, cores: int) -> str:
    if name == "graviton3":
        return "".join(GRAVITON3_CPUINFO.replace("processor\t: 0", f"processor\t: {i}")
                       for i in range(cores))
    model, flags = CPUINFO[name]
    return "".join(f"processor\t: {i}\nvendor_id\t: x\nmodel name\t: {model}\n"
                   f"flags\t\t: {flags}\n\n" for i in range(cores))


def profile_hardware(name: str, root: Path, *, cores: int = 4,
                     quota_cpus: float | None = None) -> HardwareInfo:
    """``detect()`` run on the files of machine ``name`` written under ``root`` (a cgroup v2
    ``cpu.max`` when ``quota_cpus`` is given), without GPUs."""
    proc, cgroup = root / name / "proc", root / name / "cgroup"
    (proc / "self").mkdir(parents=True, exist_ok=True)
    cgroup.mkdir(parents=True, exist_ok=True)
    (proc / "cpuinfo").write_text(_cpuinfo(name, cores))
    (proc / "self" / "cgroup").write_text("0::/\n")
    if quota_cpus is not None:
        (cgroup / "cpu.max").write_text(f"{int(quota_cpus * 100_000)} 100000\n")
    arch = "aarch64" if name == "graviton3" else "x86_64"
    return detect(proc, cgroup, with_gpus=False, arch=arch, logical_cores=cores)


def this_cpu() -> HardwareInfo:
    """The machine running the suite (no GPUs): for builds whose numbers depend on it."""
    return detect(with_gpus=False)
