"""Optimization passes: one registry of passes that carry their own facts, and
``build_variants``, which runs the passes in order, builds the variants each depends on first,
checks every variant it builds, and turns any failure into a "skipped: reason" result instead
of a crash.

Adding a pass (or an engine) is one module in this package plus its tests: every module here
whose name does not start with "_" is imported below, and registers its passes with the facts
the search reads (facts.py: runtime, precision, where it applies, priors per hardware path with
their sources, cost model, default plans)::

    from infertune.optimize.passes.facts import InPlan, PassFacts, Prior, Priors, Requires
    from infertune.optimize.passes.registry import register

    @register("openvino_bf16", precision="bf16", facts=PassFacts(   # kwargs go to __init__
        runtime="openvino", precision="bf16",
        requires=Requires(cpu_flags_any=("amx_bf16", "avx512_bf16"), libraries=("openvino",)),
        priors=Priors({"amx": Prior(1.30, 0.35, 0.95, "measured: ... where, when")}),
        plans=(InPlan("text", "full", 10),)))      # in the full plan of text models
    class OpenVinoPass:   # the Pass protocol (base.py): name, source, fallback_source,
        ...               # applies(ctx), apply(source, ctx), settings()

The builder's plans, the build order's priors (search/ordering.py), the cost estimates
(search/costs.py), the report's measured options and ``infertune doctor`` then see it with no
other edit.

Imports sit at the top of each module here, except the engines' own libraries (torch,
transformers, onnx, onnxruntime, openvino, nncf: optional extras), which are imported inside
the function that runs them: every pass module is imported to register its facts, on machines
with or without each engine, and ``doctor`` reports the missing ones instead of failing.

Sources: torch passes and ``ort_fp32`` start from the baseline; the other onnxruntime passes
derive from ``ort_fp32`` (the plain export, or a copy of an .onnx baseline) or ``ort_fused``
(the transformer-fused graph), falling back to ``ort_fp32`` where no fusion applies.
"""

from __future__ import annotations

import importlib
import pkgutil
import shutil
import time
from collections.abc import Callable, Mapping, Sequence

from infertune.errors import InfertuneError, InternalError, NotApplicableError
from infertune.models.adapter import Adapter
from infertune.optimize.passes.base import Pass, PassContext, QualityTarget
from infertune.optimize.passes.facts import PassFacts
from infertune.optimize.passes.registry import (
    REGISTRY,
    PassFactory,
    Registry,
    as_registry,
    create_pass,
    register,
)
from infertune.optimize.passes.variant_files import (
    Variant,
    VariantResult,
    agreement,
    predict_rows,
    write_manifest,
)

_NOT_PASSES = ("base", "facts", "registry")


def _import_pass_modules() -> None:
    """Import every pass module of this package, so each registers its passes (a module is
    the unit of extension: no list of them to keep here)."""
    for found in pkgutil.iter_modules(__path__):
        if not found.name.startswith("_") and found.name not in _NOT_PASSES:
            importlib.import_module(f"{__name__}.{found.name}")


_import_pass_modules()


def build_variants(baseline: Adapter, ctx: PassContext, names: Sequence[str] | None = None,
                   registry: Mapping[str, PassFactory] | None = None,
                   on_result: Callable[[VariantResult], None] | None = None,
                   built: dict[str, Variant] | None = None) -> list[VariantResult]:
    """Build the named variants (all registered ones when None) plus the sources they need.

    Results come in build order, one per pass; a pass that does not apply or fails is a
    "skipped" result with its reason, and the passes that depend on it are skipped too.
    ``built``: variants built by an earlier call (name -> Variant), used as sources and not
    rebuilt; it is filled in with what this call builds, so a caller can build one pass at a
    time in an order it decides."""
    reg = as_registry(registry)
    if ctx.baseline is not baseline:
        raise InternalError("build_variants: ctx.baseline must be the baseline passed in")
    passes = {name: reg.create(name) for name in (names or list(reg))}
    order = _with_sources(list(passes), reg)
    built = {} if built is None else built
    results: list[VariantResult] = []
    for name in order:
        if name in built:
            continue
        pass_ = passes.get(name) or reg.create(name)
        result = _run_one(pass_, reg.facts(name), built, ctx)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def _with_sources(names: list[str], registry: Registry) -> list[str]:
    order: list[str] = []

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if name in order:
            return
        if name in chain:
            raise InternalError(f"pass sources form a cycle: {' -> '.join((*chain, name))}")
        made = registry.create(name)
        for source in (made.source, made.fallback_source):
            if source is not None:
                visit(source, (*chain, name))
        order.append(name)

    for name in names:
        visit(name, ())
    return order


def _run_one(pass_: Pass, facts: PassFacts, built: dict[str, Variant],
             ctx: PassContext) -> VariantResult:
    started = time.perf_counter()

    def skipped(reason: str) -> VariantResult:
        shutil.rmtree(ctx.out_dir / pass_.name, ignore_errors=True)
        return VariantResult(pass_.name, "skipped", reason=reason,
                             seconds=round(time.perf_counter() - started, 3))

    source = pass_.source
    if source is not None and source not in built:
        fallback = pass_.fallback_source
        if fallback is None or fallback not in built:
            wanted = f"{source!r}" + (f" or {fallback!r}" if fallback else "")
            return skipped(f"needs variant {wanted}, which was not built")
        source = fallback
    # the pass's own rule first (it knows the model), then the hardware its facts declare
    reason = pass_.applies(ctx) or facts.reason(ctx.hardware, ctx.baseline.info.kind)
    if reason is not None:
        return skipped(reason)
    try:
        variant = check_variant(pass_.apply(built.get(source or ""), ctx), ctx)
    except InfertuneError as exc:
        return skipped(str(exc))
    except Exception as exc:  # noqa: BLE001 - exporters/quantizers raise untyped errors
        first = str(exc).strip().split("\n")[0][:300]
        return skipped(f"{type(exc).__name__} while building: {first}")
    built[pass_.name] = variant
    return VariantResult(pass_.name, "built", path=str(variant.path), manifest=variant.manifest,
                         seconds=round(time.perf_counter() - started, 3))


def check_variant(variant: Variant, ctx: PassContext) -> Variant:
    """Load the folder as a user would, run the sample inputs, require the baseline's output
    shape, and record the agreement in the manifest."""

    started = time.perf_counter()
    adapter = variant.load()
    inputs = ctx.sample_inputs()
    adapter.predict(inputs[:1])  # torch.compile compiles here; onnxruntime allocates here
    first_call_s = time.perf_counter() - started
    recipe = variant.manifest.recipe
    if recipe is not None and recipe.compile and first_call_s > ctx.compile_budget_s:
        raise NotApplicableError(
            f"load + first call took {first_call_s:.0f} s (torch.compile), over the "
            f"{ctx.compile_budget_s:.0f} s budget; raise compile_budget_s to keep it")
    reference = ctx.reference("samples")
    outputs = predict_rows(adapter, inputs)
    if outputs.shape != reference.shape:
        raise InternalError(f"variant {variant.id} produced outputs of shape {outputs.shape}; "
                            f"the baseline's are {reference.shape}")
    variant.manifest.agreement = agreement(reference, outputs)
    variant.manifest.first_call_s = round(first_call_s, 3)
    write_manifest(variant.path, variant.manifest)
    return variant


__all__ = ["REGISTRY", "Pass", "PassContext", "PassFactory", "PassFacts", "QualityTarget",
           "Registry", "build_variants", "check_variant", "create_pass", "register"]
