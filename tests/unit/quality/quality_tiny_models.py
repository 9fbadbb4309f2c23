"""Tiny seeded models for the validate CLI tests, loaded as entry points
'quality_tiny_models:baseline' and 'quality_tiny_models:noisy' (this folder is on sys.path
under pytest's default import mode)."""

from __future__ import annotations

from typing import Any

import numpy as np


def _linear(noise: float) -> tuple[Any, np.ndarray]:
    import torch

    torch.manual_seed(0)
    module = torch.nn.Linear(4, 3)
    with torch.no_grad():
        module.weight.add_(noise * torch.randn_like(module.weight))
    return module, np.zeros(4, dtype=np.float32)


def baseline() -> tuple[Any, np.ndarray]:
    return _linear(0.0)


def noisy() -> tuple[Any, np.ndarray]:
    return _linear(0.5)
