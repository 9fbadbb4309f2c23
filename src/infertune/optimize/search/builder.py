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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from infertune.hardware import HardwareInfo
from infertune.models.variant import Manifest
from infertune.optimize.findings import BuildArtifact, BuiltVariant
from infertune.optimize.passes import REGISTRY, build_variants
from infertune.optimize.passes._onnx import int8_schemes
from infertune.optimize.passes._tensor import onnx_file
from infertune.optimize.passes.base import PassContext, QualityTarget
from infertune.optimize.passes.facts import RUNTIME_TITLES, CostFacts
from infertune.optimize.passes.registry import PassFactory, Registry, as_registry
from infertune.optimize.passes.variant_files import Variant, VariantResult
from infertune.optimize.search.budget import Progress
from infertune.optimize.search.costs import build_s, screen_s, step_s
from infertune.optimize.search.ordering import PlannedPass, SearchPlan, int8_path, plan_order
from infertune.optimize.search.screening import BATCHED_PRIORS_FROM, scenario_batches
from infertune.optimize.state import RunState

Builder = Callable[[RunState, float, Progress], BuildArtifact]

BASELINE_PASS = "torch_fp32"
# An .onnx baseline's own copy (ort_fp32 copies the file) stands for the baseline instead.
ONNX_BASELINE_PASS = "ort_fp32"


def registry() -> Registry:
    """The passes a run may build: every registered one."""
    return REGISTRY


def planned(kind: str, full: bool, reg: Mapping[str, PassFactory] | None = None) -> list[str]:
    """The passes a default plan builds for ``kind`` models (``full``: the quick plan's and the
    full plan's), in the order their facts rank them (most promising first: the budget may
    stop the build early)."""
    found = as_registry(reg)
    slots = [(slot.rank, e.name) for e in found.entries()
             if (slot := e.facts.plan(kind)) is not None and (full or slot.tier == "quick")]
    return [name for _, name in sorted(slots)]


def not_run(kind: str, reg: Mapping[str, PassFactory] | None = None) -> list[str]:
    """Registered passes that apply to ``kind`` models but no default plan builds."""
    found = as_registry(reg)
    chosen = set(planned(kind, True, found))
    return [e.name for e in found.entries() if e.name not in chosen
            and (not e.facts.requires.model_kinds or kind in e.facts.requires.model_kinds)]


# What the default plans are, as the passes' facts declare them. Left out of the full plan of
# text models: torch.compile (minutes of compilation on 2 cores), static INT8 (calibration
# runs; on this model class dynamic INT8 with accuracy-aware fallback is the stronger
# candidate), graph-level and trim variants (the fused graph subsumes the first; input
# trimming is timed separately by optimize/served/input_options.py). A tensor model (an .onnx
# or torch file) has no transformer fusion; static INT8 is the pass that covers Conv graphs.
FULL_PASSES = tuple(planned("text", True))
QUICK_PASSES = tuple(planned("text", False))
TENSOR_FULL_PASSES = tuple(planned("tensor", True))
TENSOR_QUICK_PASSES = tuple(planned("tensor", False))


def plan_passes(quick: bool, budget_s: float, tensor: bool = False,
                reg: Mapping[str, PassFactory] | None = None,
                hw: HardwareInfo | None = None) -> tuple[list[str], list[str]]:
    """(passes to build, passes left out for time) for this budget and kind of model; with
    ``hw``, less the GPU passes that machine has no GPU for (see ``on_this_device``)."""
    kind = "tensor" if tensor else "text"
    full = not quick and budget_s >= 45
    full_plan = on_this_device(planned(kind, True, reg), reg, hw)
    chosen = full_plan if full else on_this_device(planned(kind, False, reg), reg, hw)
    left = [p for p in full_plan if p not in chosen]
    return chosen, left


def on_this_device(names: list[str], reg: Mapping[str, PassFactory] | None,
                   hw: HardwareInfo | None) -> list[str]:
    """``names`` less the GPU passes whose GPU ``hw`` lacks: planned on a CPU machine, they
    would only be skipped, after their estimated cost had taken budget (and --budget auto's
    estimate) from the passes that run. Without ``hw``, ``names`` as declared."""
    if hw is None:
        return names
    found = as_registry(reg)
    return [n for n in names
            if found.facts(n).device != "gpu" or found.facts(n).reason(hw) is None]


def default_builder(state: RunState, budget_s: float, progress: Progress,
                    passes: Mapping[str, PassFactory] | None = None) -> BuildArtifact:
    """Build the baseline's own variant and the ONNX export first (every ONNX pass derives
    from the export, and its measured time scales the cost of the rest), then the other passes
    in the order of their expected gain per second (ordering.py), each only while the build
    share of the budget still covers its estimated cost. ``passes``: the registry (default:
    every registered pass); its facts decide the plan, the priors and the costs. Returns every
    variant tried and the order followed (the build stage adds the baseline's id)."""
    quick = state.options.quick
    hw = state.profiling.hardware
    assert hw is not None  # detected by the setup stage, which runs first
    reg = as_registry(passes)
    kind = state.baseline.info.kind
    names, left = plan_passes(quick, budget_s, kind == "tensor", reg, hw)
    _note_unplanned(state, reg, kind, hw)
    deadline = time.monotonic() + budget_s
    # traffic that forms full batches orders the passes by their batch-16 figures where known
    batched = max(scenario_batches(state.options.scenario, hw.effective_cores,
                                   quick)) >= BATCHED_PRIORS_FROM
    job = _Building(state, _pass_context(state, hw, budget_s), reg, progress,
                    onnx_baseline=onnx_file(state.baseline) is not None)
    first = [n for n in (BASELINE_PASS, ONNX_BASELINE_PASS) if n in names]
    for name in first:
        job.run(name)
    facts = job.facts()
    for name in left:
        state.skip(f"variant {name}", f"not built: --quick, or only {budget_s:.0f} s of the "
                   "budget was left for building", round(step_s(name, facts, reg), 1))
    followed, facts = _build_by_gain(job, [n for n in names if n not in first], facts,
                                     hw, batched, deadline)
    plan = SearchPlan(followed, int8_path(hw), facts.basis)
    state.log.notes.append(plan.describe())
    baseline_pass = ONNX_BASELINE_PASS if job.onnx_baseline else BASELINE_PASS
    return BuildArtifact(built=[_built(r, baseline_pass) for r in job.results],
                         search_plan=plan)


def _pass_context(state: RunState, hw: HardwareInfo, budget_s: float) -> PassContext:
    """What every pass builds with: the baseline, this machine, the calibration inputs and the
    quality target (a cosine floor's minimum, where the scenario states one)."""
    floor = state.options.scenario.constraints.quality_floor
    target = QualityTarget()
    if floor is not None and floor.min is not None and "cosine" in floor.metric:
        target = QualityTarget(min_mean_cosine=floor.min)
    quick = state.options.quick
    return PassContext(baseline=state.baseline, hardware=hw,
                       out_dir=state.paths.variants, calibration=list(state.quality_inputs),
                       quality=target, max_calibration=64 if quick else 128,
                       n_samples=16 if quick else 32,
                       compile_budget_s=min(budget_s / 2, 120.0))


def _note_unplanned(state: RunState, reg: Registry, kind: str, hw: HardwareInfo) -> None:
    """Say which passes the plan leaves out: the GPU passes this machine cannot run, and the
    ones no default plan tries."""
    declared = planned(kind, True, reg)
    off_device = [n for n in declared if n not in on_this_device(declared, reg, hw)]
    if off_device:
        state.log.notes.append(f"GPU passes not planned ({reg.facts(off_device[0]).reason(hw)}): "
                           + ", ".join(off_device))
    state.log.notes.append("passes not tried by default (slower or subsumed): "
                       + ", ".join(not_run(kind, reg)))


@dataclass
class _Building:
    """One default build under way: the passes' context and registry, and what it has built
    (each pass builds on the variants before it)."""

    state: RunState
    ctx: PassContext
    reg: Registry
    progress: Progress
    onnx_baseline: bool  # an .onnx baseline is copied, not exported
    built: dict[str, Variant] = field(default_factory=dict)
    results: list[VariantResult] = field(default_factory=list)

    def run(self, name: str) -> None:
        for result in build_variants(self.state.baseline, self.ctx, names=[name],
                                     registry=self.reg, built=self.built):
            self.results.append(result)
            self.progress.tick(f"built {result.pass_name}: {result.status} "
                               f"({result.seconds:.0f} s)")

    def facts(self) -> CostFacts:
        return measured_facts(self.state, self.ctx, self.results, self.onnx_baseline)


def _build_by_gain(job: _Building, todo: list[str], facts: CostFacts, hw: HardwareInfo,
                   batched: bool, deadline: float) -> tuple[list[PlannedPass], CostFacts]:
    """Build ``todo`` in the order of expected gain per second, each (with the sources it
    needs) only while it fits before ``deadline``; returns the passes followed and the cost
    facts measured by the end."""
    followed: list[PlannedPass] = []
    reg = job.reg
    while todo:
        # planned again after every build: each one measures something (the fused graph's
        # node count, for one) that changes what the rest costs
        # every pass tried counts as done, built or not: a source that did not build is not
        # tried again (its dependants fall back or are skipped by build_variants)
        plan = plan_order(todo, hw, partial(_step_s, facts, reg), _sources(reg),
                          done=[r.pass_name for r in job.results], basis=facts.basis,
                          registry=reg, batched=batched)
        nxt = plan.passes[0]
        chain = [p for p in plan.passes[:plan.names.index(nxt.needed_by or nxt.name) + 1]]
        need = sum(build_s(p.name, facts, reg) for p in chain)
        left_s = deadline - time.monotonic()
        if need > left_s:
            # the next pass (with the sources it needs) does not fit: leave it out, and its
            # sources with it, and see whether a cheaper one does
            wanted = chain[-1].name
            job.state.skip(f"variant {wanted}",
                           f"not built: with its sources it would take about {need:.0f} s "
                           f"(estimate from {facts.basis}) and {max(left_s, 0.0):.0f} s of the "
                           "budget's share for building was left",
                           round(need + screen_s(wanted, facts), 1))
            todo = [n for n in todo if n != wanted]
            continue
        followed.append(nxt)
        job.run(nxt.name)
        facts = job.facts()
        done = {r.pass_name for r in job.results}
        todo = [n for n in todo if n not in done]
    return followed, facts


def measured_facts(state: RunState, ctx: PassContext, results: list[VariantResult],
                   onnx_baseline: bool) -> CostFacts:
    """The run's cost facts (state.log.cost_facts, updated) with the export's measured seconds and
    the number of nodes mixed precision would score: the fused graph's Attention and MatMul
    nodes once it is built, else the exported graph's MatMuls (an .onnx baseline is copied,
    not exported: its export cost stays scaled from the parameter count)."""
    facts = state.log.cost_facts or CostFacts(call_ms=_median(state.base_samples) or 1.0,
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
    state.log.cost_facts = dataclasses.replace(facts, **changes)
    return state.log.cost_facts


def _step_s(facts: CostFacts, reg: Registry, name: str) -> float:
    return step_s(name, facts, reg)


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def _sources(reg: Registry) -> Callable[[str], list[str]]:
    """Pass name -> the passes build_variants builds before it (source and fallback)."""
    def sources(name: str) -> list[str]:
        made = reg.create(name)
        return [s for s in (made.source, made.fallback_source) if s is not None]
    return sources


def _built(result: VariantResult, baseline_pass: str = BASELINE_PASS) -> BuiltVariant:
    manifest = result.manifest
    if manifest is None:
        variant_id, title = result.pass_name, result.pass_name
    else:
        variant_id, title = manifest.id or result.pass_name, _title(manifest)
    return BuiltVariant(variant_id=variant_id,
                        path=Path(result.path) if result.path else None, title=title,
                        skipped=None if result.built else (result.reason or "skipped"),
                        is_baseline=result.pass_name == baseline_pass, manifest=manifest,
                        build_s=result.seconds)


def _title(manifest: Manifest) -> str:
    runtime = RUNTIME_TITLES.get(manifest.runtime, manifest.runtime)
    passes = ", ".join(p.name for p in manifest.passes) or "no passes"
    return f"{runtime} {manifest.precision} ({passes})"
