"""Variant building for a run: drives ``optimize.passes.build_variants`` (issue 5) into
``runs/<name>/variants/`` and turns its results into BuiltVariants the search screens.

Which passes run depends on the budget: ``--quick`` and short budgets leave out the slow ones
(torch.compile, static calibration, the per-layer sensitivity search), and say so. The order
they are built (and then screened) in is by expected gain per second (ordering.py), with
costs scaled from the export and call times measured in the run (costs.py).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from infertune.optimize.costs import CostFacts, build_s, screen_s, step_s
from infertune.optimize.ordering import PlannedPass, SearchPlan, int8_path, plan_order
from infertune.optimize.passes import REGISTRY, build_variants, create_pass
from infertune.optimize.passes._onnx import int8_schemes
from infertune.optimize.passes._tensor import onnx_file
from infertune.optimize.passes.base import PassContext, QualityTarget
from infertune.optimize.passes.threads import OrtThreadsPass, Plan
from infertune.optimize.search import Progress
from infertune.optimize.state import BuiltVariant, RunState
from infertune.optimize.variant import Variant, VariantResult

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
    """Build the baseline's own variant and the ONNX export first (every ONNX pass derives
    from the export, and its measured time scales the cost of the rest), then the other passes
    in the order of their expected gain per second (ordering.py), each only while the build
    share of the budget still covers its estimated cost."""
    floor = state.options.scenario.constraints.quality_floor
    target = QualityTarget()
    if floor is not None and floor.min is not None and "cosine" in floor.metric:
        target = QualityTarget(min_mean_cosine=floor.min)
    quick = state.options.quick
    hw = state.hardware
    assert hw is not None  # detected by the setup stage, which runs first
    ctx = PassContext(baseline=state.baseline, hardware=hw,
                      out_dir=state.paths.variants, calibration=list(state.quality_inputs),
                      quality=target, max_calibration=64 if quick else 128,
                      n_samples=16 if quick else 32,
                      compile_budget_s=min(budget_s / 2, 120.0))
    tensor = state.baseline.info.kind == "tensor"
    names, left = plan_passes(quick, budget_s, tensor)
    not_run = [p for p in NOT_RUN if p not in names] if tensor else list(NOT_RUN)
    state.notes.append("passes not tried by default (slower or subsumed): " + ", ".join(not_run))
    deadline = time.monotonic() + budget_s
    reg = registry()
    built: dict[str, Variant] = {}
    results: list[VariantResult] = []

    def run(name: str) -> None:
        for result in build_variants(state.baseline, ctx, names=[name], registry=reg,
                                     built=built):
            results.append(result)
            progress.tick(f"built {result.pass_name}: {result.status} "
                          f"({result.seconds:.0f} s)")

    onnx_baseline = onnx_file(state.baseline) is not None
    first = [n for n in (BASELINE_PASS, ONNX_BASELINE_PASS) if n in names]
    for name in first:
        run(name)
    facts = measured_facts(state, ctx, results, onnx_baseline)
    for name in left:
        state.skip(f"variant {name}", f"not built: --quick, or only {budget_s:.0f} s of the "
                   "budget was left for building", round(step_s(name, facts), 1))
    followed: list[PlannedPass] = []
    todo = [n for n in names if n not in first]
    while todo:
        # planned again after every build: each one measures something (the fused graph's
        # node count, for one) that changes what the rest costs
        # every pass tried counts as done, built or not: a source that did not build is not
        # tried again (its dependants fall back or are skipped by build_variants)
        plan = plan_order(todo, hw, partial(_step_s, facts), _sources(reg),
                          done=[r.pass_name for r in results], basis=facts.basis)
        nxt = plan.passes[0]
        chain = [p for p in plan.passes[:plan.names.index(nxt.needed_by or nxt.name) + 1]]
        need = sum(build_s(p.name, facts) for p in chain)
        left_s = deadline - time.monotonic()
        if need > left_s:
            # the next pass (with the sources it needs) does not fit: leave it out, and its
            # sources with it, and see whether a cheaper one does
            wanted = chain[-1].name
            state.skip(f"variant {wanted}",
                       f"not built: with its sources it would take about {need:.0f} s "
                       f"(estimate from {facts.basis}) and {max(left_s, 0.0):.0f} s of the "
                       "budget's share for building was left",
                       round(need + screen_s(wanted, facts), 1))
            todo = [n for n in todo if n != wanted]
            continue
        followed.append(nxt)
        run(nxt.name)
        facts = measured_facts(state, ctx, results, onnx_baseline)
        done = {r.pass_name for r in results}
        todo = [n for n in todo if n not in done]
    state.search_plan = SearchPlan(followed, int8_path(hw), facts.basis)
    state.notes.append(state.search_plan.describe())
    baseline_pass = ONNX_BASELINE_PASS if onnx_baseline else BASELINE_PASS
    return [_built(r, baseline_pass) for r in results]


def measured_facts(state: RunState, ctx: PassContext, results: list[VariantResult],
                   onnx_baseline: bool) -> CostFacts:
    """The run's cost facts (state.cost_facts, updated) with the export's measured seconds and
    the number of nodes mixed precision would score: the fused graph's Attention and MatMul
    nodes once it is built, else the exported graph's MatMuls (an .onnx baseline is copied,
    not exported: its export cost stays scaled from the parameter count)."""
    facts = state.cost_facts or CostFacts(call_ms=_median(state.base_samples) or 1.0,
                                          item_ms=_median(state.base_samples) or 1.0)
    changes: dict[str, Any] = {"schemes": len(int8_schemes(ctx.hardware)),
                               "n_calibration": min(ctx.max_calibration,
                                                    len(state.quality_inputs) or 1),
                               "n_samples": ctx.n_samples,
                               "n_quality": len(state.quality_inputs) or facts.n_quality}
    graphs = {r.pass_name: r for r in results if r.built and r.manifest is not None}
    export, fused = graphs.get(ONNX_BASELINE_PASS), graphs.get("ort_fused")
    # before fusion, half the export's MatMuls: minilm's fused graph has 24 quantizable nodes
    # (6 Attention + 18 MatMul) where its export has 48 MatMuls (the attention products
    # have no constant weight and Q, K, V fuse into one Attention node)
    for graph, share in ((export, 0.5), (fused, 1.0)):  # the fused count wins when built
        if graph is not None and graph.manifest is not None:
            ops = graph.manifest.op_counts
            changes["matmuls"] = int(share * (ops.get("MatMul", 0) + ops.get("Gemm", 0)
                                              + ops.get("Attention", 0)))
    if export is not None and not onnx_baseline:
        changes["export_s"] = export.seconds
    state.cost_facts = dataclasses.replace(facts, **changes)
    return state.cost_facts


def _step_s(facts: CostFacts, name: str) -> float:
    return step_s(name, facts)


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def _sources(reg: dict[str, Any]) -> Callable[[str], list[str]]:
    """Pass name -> the passes build_variants builds before it (source and fallback)."""
    def sources(name: str) -> list[str]:
        made = create_pass(name, reg)
        return [s for s in (made.source, made.fallback_source) if s is not None]
    return sources


def _built(result: VariantResult, baseline_pass: str = BASELINE_PASS) -> BuiltVariant:
    manifest = result.manifest.to_dict() if result.manifest is not None else {}
    variant_id = manifest.get("id") or result.pass_name
    title = _title(manifest) if manifest else result.pass_name
    return BuiltVariant(variant_id=variant_id,
                        path=Path(result.path) if result.path else None, title=title,
                        skipped=None if result.built else (result.reason or "skipped"),
                        is_baseline=result.pass_name == baseline_pass, manifest=manifest,
                        build_s=result.seconds)


def _title(manifest: dict[str, Any]) -> str:
    name = str(manifest.get("runtime", ""))
    runtime = {"onnxruntime": "ONNX Runtime", "torch": "PyTorch"}.get(name, name)
    passes = ", ".join(p["name"] for p in manifest.get("passes", [])) or "no passes"
    return f"{runtime} {manifest.get('precision', '')} ({passes})"
