"""onnxruntime graph optimization level (basic / extended / all), applied at session load."""

from __future__ import annotations

from dataclasses import dataclass

from infertune.models.variant import GraphLevel, Manifest, PassRecord
from infertune.optimize.passes._onnx import ORT, OrtDerivedPass
from infertune.optimize.passes.base import PassContext, PassSettings
from infertune.optimize.passes.facts import PassFacts, SettingCost
from infertune.optimize.passes.registry import register


@dataclass(frozen=True)
class GraphLevelSettings(PassSettings):
    graph_optimization_level: GraphLevel


@register("ort_graph_basic", level="basic", facts=PassFacts(
    runtime="onnxruntime", precision="fp32", requires=ORT, cost=SettingCost(),
    summary="onnxruntime's basic graph optimizations at load"))
@register("ort_graph_extended", level="extended", facts=PassFacts(
    runtime="onnxruntime", precision="fp32", requires=ORT, cost=SettingCost(),
    summary="onnxruntime's extended graph optimizations at load"))
class OrtGraphLevelPass(OrtDerivedPass):
    source = "ort_fp32"

    def __init__(self, level: GraphLevel = "basic") -> None:
        self.level = level
        self.name = f"ort_graph_{level}"

    def settings(self) -> GraphLevelSettings:
        return GraphLevelSettings(self.level)

    def update(self, manifest: Manifest, ctx: PassContext, record: PassRecord) -> None:
        manifest.threads.graph_level = self.level
