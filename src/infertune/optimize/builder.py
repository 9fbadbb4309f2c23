"""Variant building for a run: drives ``optimize.passes.build_variants`` (issue 5) into
``runs/<name>/variants/`` and turns its results into BuiltVariants the search screens.

Which passes run depends on the budget: ``--quick`` and short budgets leave out the slow ones
(torch.compile, static calibration, the per-layer sensitivity search), and say so.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from infertune.optimize.passes import REGISTRY, build_variants
from infertune.optimize.passes._tensor import onnx_file
from infertune.optimize.passes.base import PassContext, QualityTarget
from infertune.optimize.passes.threads import OrtThreadsPass, Plan
from infertune.optimize.search import Progress
from infertune.optimize.state import BuiltVariant, RunState
from infertune.optimize.variant import VariantResult

Builder = Callable[[RunState, float, Progress], list[BuiltVariant]]

BASELINE_PASS = "torch_fp32"
# An .onnx baseline's own copy (ort_fp32 copies the file) stands for the baseline instead.
ONNX_BASELINE_PASS = "ort_fp32"
# The passes a full run builds, cheapest first. Left out by default: torch.compile (minutes of
# compilation on 2 cores), static INT8 (calibration runs; on this model class dynamic INT8 with
# accuracy-aware fallback is the stronger candidate), graph-level and trim variants (the fused
# graph subsumes the first; input trimming is timed separately by optimize/inputs.py).
FULL_PASSES = ("torch_fp32", "ort_fp32", "ort_fused", "ort_int8_dynamic_per_channel",
               "ort_int8_threads_one", "ort_int8_mixed", "ort_int8_threads_cores_nospin",
               "torch_bf16", "ort_int8_dynamic_per_tensor", "ort_threads_cores_nospin")
# (most promising first: the budget may stop the build early)
QUICK_PASSES = ("torch_fp32", "ort_fp32", "ort_fused", "ort_int8_dynamic_per_channel",
                "ort_int8_threads_one")
# A tensor model (an .onnx or torch file) has no transformer fusion; static INT8 is the
# pass that covers Conv graphs, where dynamic INT8 does not apply.
TENSOR_FULL_PASSES = ("ort_fp32", "ort_int8_dynamic_per_channel", "ort_int8_static_minmax",
                      "ort_int8_threads_one", "ort_threads_cores_nospin", "ort_int8_mixed",
                      "ort_int8_dynamic_per_tensor", "ort_int8_static_percentile")
TENSOR_QUICK_PASSES = ("ort_fp32", "ort_int8_dynamic_per_channel", "ort_int8_static_minmax")
NOT_RUN = ("torch_compile", "ort_int8_static_minmax", "ort_int8_static_entropy",
           "ort_int8_static_percentile", "torch_int8_dynamic", "ort_graph_basic",
           "ort_graph_extended", "ort_trim_p99", "ort_bucketed", "ort_threads_one",
           "ort_threads_cores", "torch_fp16")


class Int8ThreadsPass(OrtThreadsPass):
    """Thread plans on top of the per-channel INT8 graph (the passes' own thread variants
    start from the fp32 fused graph). Which plan wins depends on the machine and on what else
    runs on it: on a busy 2-core container one intra-op thread without spinning beat two
    spinning threads at p95 in our runs, while an idle machine favours two; so both are
    built and the search measures them."""

    source = "ort_int8_dynamic_per_channel"
    fallback_source = None

    def __init__(self, plan: Plan = "one") -> None:
        super().__init__(plan)
        self.name = f"ort_int8_threads_{plan}"


def registry() -> dict[str, Any]:
    return REGISTRY | {"ort_int8_threads_one": partial(Int8ThreadsPass, "one"),
                       "ort_int8_threads_cores_nospin": partial(Int8ThreadsPass,
                                                                "cores_nospin")}


def plan_passes(quick: bool, budget_s: float, tensor: bool = False
                ) -> tuple[list[str], list[str]]:
    """(passes to build, passes left out for time) for this budget and kind of model."""
    full_plan, quick_plan = ((TENSOR_FULL_PASSES, TENSOR_QUICK_PASSES) if tensor
                             else (FULL_PASSES, QUICK_PASSES))
    full = not quick and budget_s >= 45
    chosen = list(full_plan if full else quick_plan)
    left = [p for p in full_plan if p not in chosen]
    return chosen, left


def default_builder(state: RunState, budget_s: float, progress: Progress) -> list[BuiltVariant]:
    floor = state.options.scenario.constraints.quality_floor
    target = QualityTarget()
    if floor is not None and floor.min is not None and "cosine" in floor.metric:
        target = QualityTarget(min_mean_cosine=floor.min)
    quick = state.options.quick
    assert state.hardware is not None  # detected by the setup stage, which runs first
    ctx = PassContext(baseline=state.baseline, hardware=state.hardware,
                      out_dir=state.paths.variants, calibration=list(state.quality_inputs),
                      quality=target, max_calibration=64 if quick else 128,
                      n_samples=16 if quick else 32,
                      compile_budget_s=min(budget_s / 2, 120.0))
    tensor = state.baseline.info.kind == "tensor"
    names, left = plan_passes(quick, budget_s, tensor)
    for name in left:
        state.skip(f"variant {name}", f"not built: --quick, or only {budget_s:.0f} s of the "
                   "budget was left for building", 30.0)
    not_run = [p for p in NOT_RUN if p not in names] if tensor else list(NOT_RUN)
    state.notes.append("passes not tried by default (slower or subsumed): " + ", ".join(not_run))
    results: list[VariantResult] = []
    deadline = time.monotonic() + budget_s

    def on_result(result: VariantResult) -> None:
        results.append(result)
        progress.tick(f"built {result.pass_name}: {result.status}")
        if time.monotonic() > deadline and len(results) < len(names):
            raise _OutOfTime

    try:
        build_variants(state.baseline, ctx, names=names, registry=registry(),
                       on_result=on_result)
    except _OutOfTime:
        done = {r.pass_name for r in results}
        for name in names:
            if name not in done:
                state.skip(f"variant {name}", f"not built: the {budget_s:.0f} s share of the "
                           "budget for building ran out", 30.0)
    baseline_pass = ONNX_BASELINE_PASS if onnx_file(state.baseline) else BASELINE_PASS
    return [_built(r, baseline_pass) for r in results]


class _OutOfTime(Exception):
    """Raised from build_variants' result callback to stop building when time is up."""


def _built(result: VariantResult, baseline_pass: str = BASELINE_PASS) -> BuiltVariant:
    manifest = result.manifest.to_dict() if result.manifest is not None else {}
    variant_id = manifest.get("id") or result.pass_name
    title = _title(manifest) if manifest else result.pass_name
    return BuiltVariant(variant_id=variant_id,
                        path=Path(result.path) if result.path else None, title=title,
                        skipped=None if result.built else (result.reason or "skipped"),
                        is_baseline=result.pass_name == baseline_pass, manifest=manifest)


def _title(manifest: dict[str, Any]) -> str:
    name = str(manifest.get("runtime", ""))
    runtime = {"onnxruntime": "ONNX Runtime", "torch": "PyTorch"}.get(name, name)
    passes = ", ".join(p["name"] for p in manifest.get("passes", [])) or "no passes"
    return f"{runtime} {manifest.get('precision', '')} ({passes})"
