"""onnxruntime graph optimization level (basic / extended / all), applied at session load."""

from __future__ import annotations

from typing import Any

from infertune.models.variant import GraphLevel, Manifest, PassRecord
from infertune.optimize.passes._onnx import OrtDerivedPass
from infertune.optimize.passes.base import PassContext


class OrtGraphLevelPass(OrtDerivedPass):
    source = "ort_fp32"

    def __init__(self, level: GraphLevel = "basic") -> None:
        self.level = level
        self.name = f"ort_graph_{level}"

    def settings(self) -> dict[str, Any]:
        return {"graph_optimization_level": self.level}

    def update(self, manifest: Manifest, ctx: PassContext, record: PassRecord) -> None:
        manifest.threads.graph_level = self.level
