"""Cascade and tiers: an optional fast model answers the inputs it is confident about; the
rest go to the full model.

Tiers a caller can ask for:
  fast      the fast model only (the full model when no fast model is configured)
  standard  the cascade: fast model first, inputs below the confidence threshold go to the full
            model (the full model alone when no cascade is configured)
  quality   the full model only

Confidence is read from a classifier's probability vector: ``probability`` is the top
probability, ``margin`` the gap between the top two. A reranker's (or binary classifier's) one
score is a logit: its probability p = sigmoid(score) gives ``probability`` max(p, 1 - p) and
``margin`` |2p - 1|. Any other output (an embedding, a vector that is not a distribution) has
no confidence, so it is never taken as confident. ``optimize`` sizes its cascade thresholds
with this same function (optimize/served/cascade_eval.py), so a threshold it picks means the
same here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from infertune.errors import ConfigError
from infertune.models.adapter import Adapter

Tier = Literal["fast", "standard", "quality"]
ConfidenceMetric = Literal["probability", "margin"]


def confidence(output: Any, metric: ConfidenceMetric = "probability",
               task: str = "classification") -> float | None:
    """The confidence of one output of a ``task`` model, or None when it has none."""
    try:
        probs = np.asarray(output, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if task == "reranking":
        if probs.size != 1 or not np.isfinite(probs).all():
            return None
        p = float(1.0 / (1.0 + np.exp(-probs.reshape(()))))
        return max(p, 1.0 - p) if metric == "probability" else abs(2.0 * p - 1.0)
    if (task != "classification" or probs.ndim != 1 or probs.size < 2 or np.any(probs < 0)
            or abs(probs.sum() - 1) > 1e-3):
        return None
    top = np.sort(probs)[::-1]
    return float(top[0] if metric == "probability" else top[0] - top[1])


@dataclass
class Cascade:
    """A fast model and the confidence it must reach to answer without the full model."""

    fast: Adapter
    threshold: float | None
    metric: ConfidenceMetric = "probability"

    def __post_init__(self) -> None:
        if self.threshold is not None and not 0 < self.threshold <= 1:
            raise ConfigError(f"cascade_threshold = {self.threshold}: must be in (0, 1]; "
                              "e.g. 0.9 for a 90% top probability")

    def uses_fast(self, tier: Tier) -> bool:
        return tier == "fast" or (tier == "standard" and self.threshold is not None)

    def confident(self, outputs: Sequence[Any], tier: Tier) -> list[bool]:
        """Which fast-model outputs stand as answers for ``tier``."""
        if tier == "fast":
            return [True] * len(outputs)
        return [self._passes(out) for out in outputs]

    def _passes(self, output: Any) -> bool:
        score = confidence(output, self.metric, self.fast.info.task)
        return score is not None and self.threshold is not None and score >= self.threshold


def without_spinning(*adapters: Adapter) -> list[Adapter]:
    """The cascade's onnxruntime models on new sessions whose intra-op threads do not spin.

    Two models alternate in one process here, and an idle session's spinning threads take the
    cores from the busy one. benchmarks/cascade_spinning.py (minilm per-tensor then
    per-channel INT8, 2-core EPYC, 5 processes of 300 requests each way): cascade p95 9.9 ms
    without spinning against 12.2 ms with it (0.81x), for p50 2.31 against 2.17 ms (1.06x);
    serving targets the tail. A runner that cannot reopen its session is left as it is."""
    out = []
    for adapter in adapters:
        reopen = getattr(adapter.runner, "reopen", None)
        opened = getattr(adapter.runner, "opened_with", None)
        if reopen is not None and opened is not None and opened.get("allow_spinning", True):
            adapter = adapter.with_runner(reopen(allow_spinning=False))
        out.append(adapter)
    return out
