"""Accuracy-aware mixed precision: INT8 everywhere except the layers the quality floor needs.

1. Sensitivity: quantize each quantizable node (MatMul with constant weights, Attention)
   alone and measure the final-output agreement with the baseline on calibration inputs.
2. Keep the most sensitive nodes in fp32 one at a time (nodes_to_exclude) until the floor
   holds, so the variant has as few fp32 layers as the floor allows.
The manifest lists every fp32 node with its measured solo cosine and rank."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from infertune.errors import NotApplicableError
from infertune.models.variant import Agreement, Fp32Layer, Manifest, PassRecord
from infertune.optimize.passes._onnx import (
    ORT,
    Int8Settings,
    OrtDerivedPass,
    int8_scheme,
    score_graph,
)
from infertune.optimize.passes._priors import int8_priors
from infertune.optimize.passes.base import PassContext, built
from infertune.optimize.passes.facts import InPlan, PassFacts, QuantizeCost
from infertune.optimize.passes.ort_dynamic_int8 import quantize_dynamic_file
from infertune.optimize.passes.registry import register


@dataclass
class Sensitivity:
    node: str
    op_type: str
    mean_cosine: float  # final-output mean cosine with only this node quantized


@dataclass(frozen=True, kw_only=True)
class MixedSettings(Int8Settings):
    """The search asked for, and what it found (set at build): every quantizable node's solo
    sensitivity, most sensitive first, and the nodes it kept in fp32."""

    per_channel: bool
    search_margin: float
    method: str = "solo sensitivity, greedy fp32"
    floor: str | None = built()
    calibration_inputs: int | None = built()
    quantizable_nodes: int | None = built()
    fp32_nodes: int | None = built()
    calibration_mean_cosine: float | None = built()
    sensitivity: list[tuple[str, str, float]] | None = built()  # (node, op_type, mean cosine)
    excluded: list[str] | None = built()


@register("ort_int8_mixed", facts=PassFacts(
    runtime="onnxruntime", precision="int8-mixed", requires=ORT,
    priors=int8_priors(1.53, 0.95), cost=QuantizeCost("mixed"),
    plans=(InPlan("text", "full", 5), InPlan("tensor", "full", 5)),
    summary="per-tensor INT8 with the layers the quality floor needs kept in fp32"))
# per-channel base: for floors above what all-INT8 per-channel meets
@register("ort_int8_mixed_per_channel", per_channel=True, facts=PassFacts(
    runtime="onnxruntime", precision="int8-mixed", requires=ORT, cost=QuantizeCost("mixed"),
    summary="per-channel INT8 with the layers the quality floor needs kept in fp32"))
class MixedPrecisionPass(OrtDerivedPass):
    source = "ort_fused"
    fallback_source = "ort_fp32"
    precision = "int8-mixed"

    def __init__(self, per_channel: bool = False, margin: float = 0.002) -> None:
        # per-tensor by default: the cheapest INT8 kernels, with accuracy bought back per layer
        self.per_channel = per_channel
        # the search scores the calibration inputs it selects on; on minilm a mix that met
        # 0.99 there with no margin measured 0.9901 on a wider held-out sample
        self.margin = margin
        self.name = "ort_int8_mixed_per_channel" if per_channel else "ort_int8_mixed"

    def settings(self) -> MixedSettings:
        return MixedSettings(per_channel=self.per_channel, search_margin=self.margin)

    def transform(self, src: Path, dst: Path, ctx: PassContext, record: PassRecord) -> None:
        scheme = int8_scheme(ctx.hardware)
        # onnxruntime's DynamicQuantizeLinear makes uint8 activations whatever the CPU
        found = replace(self.settings(), activation_type="uint8", weight_type=scheme.weight,
                        reduce_range=scheme.reduce_range, scheme_reason=scheme.reason,
                        floor=ctx.quality.describe())
        with tempfile.TemporaryDirectory() as tmp:
            trial = Path(tmp) / "trial.onnx"

            def score(**kw: Any) -> Agreement:
                quantize_dynamic_file(src, trial, per_channel=self.per_channel,
                                      weight=scheme.weight, reduce_range=scheme.reduce_range, **kw)
                return score_graph(trial, ctx)

            ranked = sorted((Sensitivity(n, op, score(only=[n]).mean_cosine)
                             for n, op in quantizable_nodes(src)), key=lambda s: s.mean_cosine)
            kept, agreed = _greedy(ranked, ctx, score, self.margin)
            shutil.copyfile(trial, dst)  # the last trial scored is the mix that met the floor
        record.settings |= replace(
            found, calibration_inputs=len(ctx.calibration_inputs()),
            quantizable_nodes=len(ranked), fp32_nodes=len(kept),
            calibration_mean_cosine=round(agreed.mean_cosine, 6),
            sensitivity=[(s.node, s.op_type, round(s.mean_cosine, 6)) for s in ranked],
            excluded=[s.node for s in kept]).to_dict()

    def update(self, manifest: Manifest, ctx: PassContext, record: PassRecord) -> None:
        found = MixedSettings.from_dict(record.settings)
        ranked = found.sensitivity or []
        rank = {node: i + 1 for i, (node, _, _) in enumerate(ranked)}
        solo = {node: (op, cos) for node, op, cos in ranked}
        manifest.fp32_layers = [
            Fp32Layer(node, f"{solo[node][0]} quantized alone gave mean cosine "
                            f"{solo[node][1]:.5f} (sensitivity rank {rank[node]} of "
                            f"{len(ranked)}); kept fp32 to meet {ctx.quality.describe()}")
            for node in found.excluded or []]


def _greedy(ranked: list[Sensitivity], ctx: PassContext, score: Any,
            margin: float) -> tuple[list[Sensitivity], Agreement]:
    for k in range(len(ranked)):  # k = len(ranked) would be no INT8 at all
        found = score(exclude=[s.node for s in ranked[:k]])
        if ctx.quality.holds(found, margin):
            return ranked[:k], found
    raise NotApplicableError(
        f"no INT8 mix meets {ctx.quality.describe()} (+{margin} margin) on the calibration "
        f"inputs even with "
        f"{len(ranked) - 1} of {len(ranked)} nodes in fp32; use the fp32 variant")


def quantizable_nodes(path: Path) -> list[tuple[str, str]]:
    """(name, op_type) of MatMul nodes with a constant weight, and Attention nodes."""
    import onnx

    graph = onnx.load(str(path)).graph
    constants = {init.name for init in graph.initializer}
    found = []
    for node in graph.node:
        if node.op_type == "Attention" or (node.op_type == "MatMul" and
                                           node.input[1] in constants):
            if not node.name:
                raise NotApplicableError("the graph has unnamed MatMul nodes; cannot exclude them")
            found.append((node.name, node.op_type))
    if not found:
        raise NotApplicableError("no MatMul with constant weights to quantize")
    return found
