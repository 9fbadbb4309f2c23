"""Refuse to judge quality against a baseline whose outputs do not vary.

Every quality gate compares a variant with the baseline (or the baseline with labels). When the
baseline returns the same output for every input, a variant that returns the same constant
agrees with it perfectly, and every gate passes while the model is useless. The usual causes
are a wrong task (a softmax over a one-logit reranker head gives 1.0 for every input) or a
broken export. So before any comparison, each output dimension is checked across the held-out
inputs; outputs that do not vary in any dimension are an error, never a pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from infertune.errors import QualityFloorError

# A dimension varies when its spread across inputs exceeds this share of its magnitude (float32
# rounding of one constant output stays far below it; a random-weight tiny model's scores,
# which barely vary, still clear it by orders of magnitude).
RELATIVE_SPREAD = 1e-6


class DegenerateOutputsError(QualityFloorError):
    """The baseline's outputs are (near-)constant across the held-out inputs."""


def varying_dimensions(outputs: np.ndarray) -> np.ndarray:
    """Boolean per output dimension (flattened): does it vary across the examples?"""
    flat = np.asarray(outputs, dtype=np.float64).reshape(len(outputs), -1)
    spread = flat.max(axis=0) - flat.min(axis=0)
    scale = np.maximum(np.abs(flat).max(axis=0), 1.0)
    return np.asarray(spread > RELATIVE_SPREAD * scale)


def check_outputs_vary(outputs: np.ndarray, task: str, who: str = "the baseline",
                       inputs: Sequence[Any] | None = None) -> None:
    """Raise DegenerateOutputsError when no output dimension varies across the examples.
    Skipped when there are fewer than two examples, or (with ``inputs``) fewer than two
    distinct inputs, since equal inputs rightly give equal outputs."""
    if len(outputs) < 2 or (inputs is not None and _distinct(inputs) < 2):
        return
    if varying_dimensions(outputs).any():
        return
    value = float(np.asarray(outputs, dtype=np.float64).reshape(len(outputs), -1)[0, 0])
    raise DegenerateOutputsError(
        f"{who} returns the same output for all {len(outputs)} held-out inputs (first value "
        f"{value:.6g}), so no quality comparison can mean anything; {_cause(task, outputs)}")


def _cause(task: str, outputs: np.ndarray) -> str:
    width = int(np.prod(np.asarray(outputs).shape[1:])) if np.asarray(outputs).ndim > 1 else 1
    if task == "classification" and width == 1:
        return ("a softmax over a single logit is 1.0 for every input: a one-logit head is a "
                "relevance score, so load it as reranking (remove model.task or set "
                "task: reranking)")
    if task == "reranking":
        return ("check that the inputs are [query, passage] pairs the model was trained on, "
                "and that the checkpoint's head was saved with its weights")
    return ("check the model's task (model.task in the scenario), that its weights loaded, and "
            "that the held-out inputs differ from each other")


def _distinct(inputs: Sequence[Any]) -> int:
    seen: set[Any] = set()
    for item in inputs:
        try:
            seen.add(item if not isinstance(item, np.ndarray) else item.tobytes())
        except TypeError:  # an unhashable input (a dict): count it as distinct
            return 2
        if len(seen) >= 2:
            break
    return len(seen)
