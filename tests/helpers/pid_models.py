"""Entry-point models that say which process ran them, for `infertune compare`'s test
(loaded as `pid_models:side_a` / `pid_models:side_b` with tests/helpers on PYTHONPATH).

Every forward appends "<side> <pid>" to the file $PID_MODELS_LOG, so a test can tell in which
process each side's requests were computed.
"""

from __future__ import annotations

import os

import torch


class PidLogger(torch.nn.Module):  # type: ignore[misc]  # torch is untyped here
    def __init__(self, side: str) -> None:
        super().__init__()
        self.side = side

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        log = os.environ.get("PID_MODELS_LOG")
        if log:
            with open(log, "a") as out:
                out.write(f"{self.side} {os.getpid()}\n")
        return x * 2


def side_a() -> tuple[torch.nn.Module, torch.Tensor]:
    return PidLogger("A"), torch.zeros(4)


def side_b() -> tuple[torch.nn.Module, torch.Tensor]:
    return PidLogger("B"), torch.zeros(4)
