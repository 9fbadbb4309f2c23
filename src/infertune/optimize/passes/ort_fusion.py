"""onnxruntime's transformer optimizer (model_type "bert"): fuses Attention,
SkipLayerNormalization, BiasGelu and EmbedLayerNormalization in the saved graph.

The manifest's op_counts are read back from the saved file, so a fusion that did not happen
shows as absent, and a note says so when no Attention node was fused.

A fusion is not always faster: on onnxruntime 1.32's CPU provider the SkipLayerNormalization
kernel ran several times slower than the Add + LayerNormalization it replaces. So the pass
times both forms on this machine at the model's hidden size first, and when the fused one is
clearly slower it keeps them apart, offline and at session load (SkipLayerNormFusion off)."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from infertune.errors import NotApplicableError
from infertune.models.variant import Manifest, PassRecord
from infertune.optimize.passes._onnx import OrtDerivedPass
from infertune.optimize.passes._priors import AMX_BATCH16_FP32, AMX_HAND, avx2_measured
from infertune.optimize.passes._tensor import ExportSettings
from infertune.optimize.passes._text import hf_reason
from infertune.optimize.passes.base import PassContext, PassSettings, built
from infertune.optimize.passes.facts import (
    FUSE_RATIO,
    MEASURED_SPREAD,
    ExportCost,
    InPlan,
    PassFacts,
    Prior,
    Priors,
    Requires,
)
from infertune.optimize.passes.registry import register, settings_of
from infertune.serial import Serial

# Hugging Face model types whose encoder layout the "bert" fusion patterns match.
BERT_LIKE = ("bert", "roberta", "xlm-roberta", "distilbert", "camembert", "electra", "mpnet")
# The fused kernel must be this much faster than its parts to be kept...
FUSED_MUST_WIN_BY = 0.9
# ... timed at this many tokens: around the p95 length of short-text traffic.
PROBE_TOKENS = 128
SKIP_LN_OPTIMIZER = "SkipLayerNormFusion"
SkipLayerNormMode = Literal["auto", "fused", "unfused"]


@dataclass(frozen=True)
class ProbeSettings(Serial):
    """The timing probe as recorded: times rounded to 0.1 us, and the verdict they gave."""

    hidden: int
    tokens: int
    blocks: int
    fused_us: float
    unfused_us: float
    fused: bool


@dataclass(frozen=True)
class FusionSettings(PassSettings):
    """The optimizer call, and what it did here (set at build): whether residual LayerNorms
    were fused, the probe that decided it ("auto"), and the fusions the optimizer reported."""

    skip_layernorm: SkipLayerNormMode
    optimizer: str = "onnxruntime.transformers.optimizer"
    model_type: str = "bert"
    opt_level: int = 0
    skip_layernorm_probe: ProbeSettings | None = built()
    skip_layernorm_fused: bool | None = built()
    optimizer_reported: dict[str, int] | None = built()


@register("ort_fused", facts=PassFacts(
    runtime="onnxruntime", precision="fp32", requires=Requires(
        libraries=("onnx", "onnxruntime"), model_kinds=("text",)),
    # on the AMX Xeon: 1.58x at batch 1, 204 texts/s at batch 16 (torch fp32: 225)
    priors=Priors({"amx": Prior(1.58, MEASURED_SPREAD, 1.0, AMX_HAND,
                                batched=204 / AMX_BATCH16_FP32)},
                  avx2_measured(1.62, 1.0).default), cost=ExportCost(FUSE_RATIO),
    plans=(InPlan("text", "quick", 2),), option="ort-fusion",
    summary="onnxruntime's transformer fusions (Attention, GELU, LayerNorm)"))
class OrtFusionPass(OrtDerivedPass):
    """``skip_layernorm``: "auto" times both forms here and keeps the faster; "fused" and
    "unfused" force one (for benchmarks and tests)."""

    name = "ort_fused"
    source = "ort_fp32"

    def __init__(self, skip_layernorm: SkipLayerNormMode = "auto") -> None:
        self.skip_layernorm = skip_layernorm

    def settings(self) -> FusionSettings:
        return FusionSettings(self.skip_layernorm)

    def applies(self, ctx: PassContext) -> str | None:
        reason = hf_reason(ctx.baseline)
        if reason:
            return reason
        model_type = _hf_config(ctx).model_type
        if model_type not in BERT_LIKE:
            return f"the transformer optimizer's bert fusions do not cover {model_type!r} models"
        return None

    def transform(self, src: Path, dst: Path, ctx: PassContext, record: PassRecord) -> None:
        from onnxruntime.transformers import optimizer
        from onnxruntime.transformers.fusion_options import FusionOptions

        config = _hf_config(ctx)
        fuse = self.skip_layernorm == "fused"
        if self.skip_layernorm == "auto":
            probe = time_skip_layernorm(config.hidden_size)
            record.settings |= replace(self.settings(),
                                       skip_layernorm_probe=probe.to_settings()).to_dict()
            fuse = probe.fuse
        record.settings |= replace(self.settings(), skip_layernorm_fused=fuse).to_dict()
        options = FusionOptions("bert")
        options.enable_skip_layer_norm = options.enable_bias_skip_layer_norm = fuse
        # opt_level 0: only the python fusions here; the session applies its own levels at load
        model = optimizer.optimize_model(
            str(src), model_type="bert", num_heads=config.num_attention_heads,
            hidden_size=config.hidden_size, opt_level=0, optimization_options=options)
        stats = {k: v for k, v in model.get_fused_operator_statistics().items() if v}
        if not stats:
            raise NotApplicableError("the transformer optimizer fused nothing in this graph")
        record.settings |= replace(self.settings(), optimizer_reported=stats).to_dict()
        model.save_model_to_file(str(dst))

    def update(self, manifest: Manifest, ctx: PassContext, record: PassRecord) -> None:
        if not manifest.op_counts.get("Attention"):
            export = settings_of(manifest.passes[0])
            attn = export.attn_implementation if isinstance(export, ExportSettings) else None
            manifest.notes.append(f"no Attention node was fused (export used {attn!r} attention)")
        found = FusionSettings.from_dict(record.settings)
        if found.skip_layernorm_fused:
            return
        # else onnxruntime's own SkipLayerNormFusion would fuse them again at load
        manifest.threads.disabled_optimizers.append(SKIP_LN_OPTIMIZER)
        probe = found.skip_layernorm_probe
        why = ("as asked (skip_layernorm='unfused')" if probe is None else
               f"on this machine it took {probe.fused_us:.0f} us against "
               f"{probe.unfused_us:.0f} us for Add + LayerNormalization ({probe.tokens} "
               f"tokens x {probe.hidden}, median of {probe.blocks} interleaved blocks)")
        manifest.notes.append(f"SkipLayerNormalization left unfused: {why}")


@dataclass(frozen=True)
class SkipLayerNormProbe:
    """Median time per call of the fused and unfused residual-add + LayerNorm, this machine."""

    hidden: int
    tokens: int
    blocks: int
    fused_us: float
    unfused_us: float

    @property
    def fuse(self) -> bool:
        return self.fused_us <= self.unfused_us * FUSED_MUST_WIN_BY

    def to_settings(self) -> ProbeSettings:
        return ProbeSettings(self.hidden, self.tokens, self.blocks, round(self.fused_us, 1),
                             round(self.unfused_us, 1), self.fuse)


def time_skip_layernorm(hidden: int, tokens: int = PROBE_TOKENS, blocks: int = 7,
                        calls: int = 30) -> SkipLayerNormProbe:
    """Times SkipLayerNormalization against Add + Add + LayerNormalization in interleaved
    blocks (about 0.1 s in all), each in a session with default threads and no graph
    optimization, so each runs as written."""
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    feeds = {name: rng.standard_normal((1, tokens, hidden), dtype=np.float32)
             for name in ("x", "skip")}
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sessions = [ort.InferenceSession(_residual_norm_graph(hidden, fused), options,
                                     providers=["CPUExecutionProvider"])
                for fused in (True, False)]
    times: list[list[float]] = [[], []]
    for session in sessions:
        for _ in range(5):
            session.run(None, feeds)
    for _ in range(blocks):
        for i, session in enumerate(sessions):
            start = time.perf_counter()
            for _ in range(calls):
                session.run(None, feeds)
            times[i].append((time.perf_counter() - start) / calls * 1e6)
    fused, unfused = (sorted(t)[len(t) // 2] for t in times)
    return SkipLayerNormProbe(hidden, tokens, blocks, fused, unfused)


def _residual_norm_graph(hidden: int, fused: bool) -> bytes:
    """LayerNorm(x + skip + bias), as one SkipLayerNormalization or as its parts."""
    from onnx import TensorProto, helper

    shape: list[str | int | None] = [1, "tokens", hidden]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("x", "skip")]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    weights = [helper.make_tensor(name, TensorProto.FLOAT, [hidden],
                                  np.full(hidden, value, dtype=np.float32))
               for name, value in (("gamma", 1.0), ("beta", 0.0), ("bias", 0.1))]
    if fused:
        nodes = [helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"],
                                  ["y"], domain="com.microsoft", epsilon=1e-12)]
    else:
        nodes = [helper.make_node("Add", ["x", "bias"], ["biased"]),
                 helper.make_node("Add", ["biased", "skip"], ["summed"]),
                 helper.make_node("LayerNormalization", ["summed", "gamma", "beta"], ["y"],
                                  axis=-1, epsilon=1e-12)]
    graph = helper.make_graph(nodes, "residual_norm", inputs, [output], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    return model.SerializeToString()


def _hf_config(ctx: PassContext) -> Any:
    return ctx.baseline.runner.module.config  # type: ignore[attr-defined]
