"""An entry-point model for the SIGTERM test (loaded by `infertune serve serve_slow_model:factory`
in a subprocess): doubles its input, and holds any batch containing a row whose first value is
7 until the file named by $SERVE_TEST_GATE exists, so the test decides when in-flight work ends.
Warm-up uses random inputs, which never start with exactly 7."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch


class HeldDoubler(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x[:, 0] == 7).any()):
            gate = Path(os.environ["SERVE_TEST_GATE"])
            while not gate.exists():
                time.sleep(0.005)
        return x * 2


def factory() -> tuple[torch.nn.Module, torch.Tensor]:
    return HeldDoubler(), torch.zeros(4)
