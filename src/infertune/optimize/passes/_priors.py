"""Where the passes' priors come from, and the one rule that carries a figure from one CPU path
to another (INT8 with and without VNNI). Each pass module states its own figures with these.

Priors are p95 speed-ups over the eager fp32 baseline at batch 1 unless a source says otherwise.
"""

from __future__ import annotations

from infertune.optimize.passes.facts import (
    GUESS_SPREAD,
    MEASURED_SPREAD,
    Prior,
    Priors,
    everywhere,
)

AVX2_DEMO = ("measured: `make demo` screening of minilm (300 batch-1 samples a side, p95) on a "
             "2-core AVX2-only AMD EPYC 7B12, 2026-12-01, runs/demo/run.json")
VNNI_KB = ("measured: minilm ORT dynamic INT8 per-channel p50 2.6 ms against 13.4 ms torch fp32 "
           "on a 2-core EPYC with avx512_vnni (report/knowledge/model.yaml, int8-cpu)")
VNNI_SCALED = ("estimate: the AVX2 figure scaled by the INT8 gain with VNNI over the gain "
               "without it (5.2x / 2.72x, the two measurements above)")
ARM_GUESS = ("estimate, not measured on ARM: taken as on VNNI, since asimd_dotprod/i8mm give "
             "ARM the same native INT8 dot product")
AMX_HAND = ("measured by hand (issue 27): minilm on a 2-core Xeon with AMX, each configuration "
            "in its own process, 600 batch-1 calls on held-out sentences, p95 over eager fp32")
# the same hand measurement's texts/s at batch 16 (two rounds in opposite order); torch fp32
# did 225, so a pass's batched figure there is its texts/s / 225
AMX_BATCH16_FP32 = 225.0
INT8_VNNI_GAIN = 5.2 / 2.72


def avx2_measured(speedup: float, p_quality: float) -> Priors:
    """A figure from the AVX2 demo that does not depend on the INT8 path."""
    return everywhere(Prior(speedup, MEASURED_SPREAD, p_quality, AVX2_DEMO))


def int8_priors(avx2_speedup: float, p_quality: float, vnni_source: str = VNNI_SCALED
                ) -> Priors:
    """An onnxruntime INT8 pass: the AVX2 demo's figure, scaled by the VNNI gain where the CPU
    has a native INT8 dot product (VNNI/AMX measured; ARM's dot product taken as VNNI's)."""
    base = Prior(avx2_speedup, MEASURED_SPREAD, p_quality, AVX2_DEMO)
    fast = avx2_speedup * INT8_VNNI_GAIN
    return Priors({"no-vnni": base, "vnni": Prior(fast, MEASURED_SPREAD, p_quality, vnni_source),
                   "arm-dot": Prior(fast, GUESS_SPREAD, p_quality, ARM_GUESS)}, default=base)
