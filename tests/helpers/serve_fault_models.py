"""Entry-point models for the serving fault suite, loaded by `infertune serve
serve_fault_models:factory` with tests/helpers on PYTHONPATH.

``factory`` builds a 4-wide doubler whose forward takes a fixed service time per batch,
$SERVE_FAULT_SERVICE_MS (default 100) whatever the batch size, so the server's capacity is
exactly max_batch_size / service time. A batch holding a row whose first value is -1 raises
ValueError (a poisoned input); a batch holding a row whose first value is 9 stalls for
$SERVE_FAULT_STALL_S seconds (default 3) before answering. Warm-up feeds random normal values,
which are never exactly -1, -2 or 9. A batch holding a row whose first value is -2 returns one
output fewer than its rows (the fault table's "wrong number of outputs"). With
$SERVE_FAULT_SEEN set, the first value of every row the
model computed is appended to that file (one line per batch), so a test can tell which
requests reached the model.
"""

from __future__ import annotations

import os
import time

import torch

POISON = -1.0
SHORT = -2.0
STALL = 9.0


class FixedTimeDoubler(torch.nn.Module):  # type: ignore[misc]  # torch is untyped here
    def __init__(self, service_s: float, stall_s: float, seen: str | None) -> None:
        super().__init__()
        self.service_s = service_s
        self.stall_s = stall_s
        self.seen = seen

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first = x[:, 0]
        if bool((first == POISON).any()):
            raise ValueError("poisoned input")
        time.sleep(self.stall_s if bool((first == STALL).any()) else self.service_s)
        if self.seen:
            with open(self.seen, "a") as log:
                log.write(" ".join(f"{v:g}" for v in first.tolist()) + "\n")
        if bool((first == SHORT).any()):
            return x[1:] * 2
        return x * 2


def factory() -> tuple[torch.nn.Module, torch.Tensor]:
    service_s = float(os.environ.get("SERVE_FAULT_SERVICE_MS", "100")) / 1000
    stall_s = float(os.environ.get("SERVE_FAULT_STALL_S", "3"))
    seen = os.environ.get("SERVE_FAULT_SEEN")
    return FixedTimeDoubler(service_s, stall_s, seen), torch.zeros(4)
