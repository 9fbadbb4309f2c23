"""Optimization passes: a typed registry and ``build_variants``, which runs the passes in
order, builds the variants each depends on first, checks every variant it builds, and turns
any failure into a "skipped: reason" result instead of a crash.

Sources: torch passes and ``ort_fp32`` start from the baseline; the other onnxruntime passes
derive from ``ort_fp32`` (the plain export, or a copy of an .onnx baseline) or ``ort_fused``
(the transformer-fused graph), falling back to ``ort_fp32`` where no fusion applies.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from functools import partial

from infertune.errors import ConfigError, InfertuneError, InternalError, NotApplicableError
from infertune.models.base import Adapter
from infertune.optimize.passes.base import Pass, PassContext, QualityTarget
from infertune.optimize.passes.mixed_precision import MixedPrecisionPass
from infertune.optimize.passes.onnx_export import OnnxExportPass
from infertune.optimize.passes.ort_dynamic_int8 import OrtDynamicInt8Pass
from infertune.optimize.passes.ort_fusion import OrtFusionPass
from infertune.optimize.passes.ort_graph import OrtGraphLevelPass
from infertune.optimize.passes.ort_static_int8 import OrtStaticInt8Pass
from infertune.optimize.passes.threads import OrtThreadsPass
from infertune.optimize.passes.torch_bf16 import TorchBf16Pass
from infertune.optimize.passes.torch_compile import TorchCompilePass
from infertune.optimize.passes.torch_eager import TorchEagerPass
from infertune.optimize.passes.torch_fp16 import TorchFp16Pass
from infertune.optimize.passes.torch_int8 import TorchInt8DynamicPass
from infertune.optimize.passes.trim import BucketPass, TrimPass
from infertune.optimize.variant import Variant, VariantResult, agreement, predict_rows

PassFactory = Callable[[], Pass]

# name -> factory; the name is also the variant id and folder name.
REGISTRY: dict[str, PassFactory] = {
    "torch_fp32": TorchEagerPass,
    "torch_bf16": TorchBf16Pass,
    "torch_fp16": TorchFp16Pass,
    "torch_compile": TorchCompilePass,
    "torch_int8_dynamic": TorchInt8DynamicPass,
    "ort_fp32": OnnxExportPass,
    "ort_graph_basic": partial(OrtGraphLevelPass, "basic"),
    "ort_graph_extended": partial(OrtGraphLevelPass, "extended"),
    "ort_fused": OrtFusionPass,
    "ort_int8_dynamic_per_tensor": partial(OrtDynamicInt8Pass, per_channel=False),
    "ort_int8_dynamic_per_channel": partial(OrtDynamicInt8Pass, per_channel=True),
    "ort_int8_static_minmax": partial(OrtStaticInt8Pass, "minmax"),
    "ort_int8_static_entropy": partial(OrtStaticInt8Pass, "entropy"),
    "ort_int8_static_percentile": partial(OrtStaticInt8Pass, "percentile"),
    "ort_int8_mixed": MixedPrecisionPass,  # per-tensor INT8 + the fp32 layers the floor needs
    # per-channel base: for floors above what all-INT8 per-channel meets
    "ort_int8_mixed_per_channel": partial(MixedPrecisionPass, per_channel=True),
    "ort_threads_one": partial(OrtThreadsPass, "one"),
    "ort_threads_cores": partial(OrtThreadsPass, "cores"),
    "ort_threads_cores_nospin": partial(OrtThreadsPass, "cores_nospin"),
    "ort_trim_p99": TrimPass,
    "ort_bucketed": BucketPass,
}


def create_pass(name: str, registry: dict[str, PassFactory] | None = None) -> Pass:
    registry = REGISTRY if registry is None else registry
    if name not in registry:
        raise ConfigError(f"unknown pass {name!r}; choose from {', '.join(registry)}")
    made = registry[name]()
    if made.name != name:
        raise InternalError(f"registry entry {name!r} builds a pass named {made.name!r}")
    return made


def build_variants(baseline: Adapter, ctx: PassContext, names: Sequence[str] | None = None,
                   registry: dict[str, PassFactory] | None = None,
                   on_result: Callable[[VariantResult], None] | None = None,
                   built: dict[str, Variant] | None = None) -> list[VariantResult]:
    """Build the named variants (all registered ones when None) plus the sources they need.

    Results come in build order, one per pass; a pass that does not apply or fails is a
    "skipped" result with its reason, and the passes that depend on it are skipped too.
    ``built``: variants built by an earlier call (name -> Variant), used as sources and not
    rebuilt; it is filled in with what this call builds, so a caller can build one pass at a
    time in an order it decides."""
    registry = REGISTRY if registry is None else registry
    if ctx.baseline is not baseline:
        raise InternalError("build_variants: ctx.baseline must be the baseline passed in")
    passes = {name: create_pass(name, registry) for name in (names or list(registry))}
    order = _with_sources(list(passes), registry)
    built = {} if built is None else built
    results: list[VariantResult] = []
    for name in order:
        if name in built:
            continue
        pass_ = passes.get(name) or create_pass(name, registry)
        result = _run_one(pass_, built, ctx)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def _with_sources(names: list[str], registry: dict[str, PassFactory]) -> list[str]:
    order: list[str] = []

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if name in order:
            return
        if name in chain:
            raise InternalError(f"pass sources form a cycle: {' -> '.join((*chain, name))}")
        made = create_pass(name, registry)
        for source in (made.source, made.fallback_source):
            if source is not None:
                visit(source, (*chain, name))
        order.append(name)

    for name in names:
        visit(name, ())
    return order


def _run_one(pass_: Pass, built: dict[str, Variant], ctx: PassContext) -> VariantResult:
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
    reason = pass_.applies(ctx)
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
    from infertune.optimize.variant import write_manifest

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


__all__ = ["REGISTRY", "Pass", "PassContext", "QualityTarget", "build_variants",
           "check_variant", "create_pass"]
