"""The run's time budget and the progress display the stages report to.

Budget rule: a step starts only when the budget left covers its stated need; otherwise it is
recorded as *not measured* with the time it would have needed, so the report can say what is
missing instead of showing a rushed number.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

# Minimum seconds a step needs to yield a figure worth reporting (on a 2-core machine).
NEED_QUICK_S = 4.0
NEED_PROPER_S = 15.0


class Progress(Protocol):
    """What the search tells its display (the CLI draws it with rich on stderr)."""

    def stage(self, name: str, detail: str = "") -> None: ...

    def tick(self, detail: str = "") -> None: ...


class NullProgress:
    def stage(self, name: str, detail: str = "") -> None:
        pass

    def tick(self, detail: str = "") -> None:
        pass


@dataclass
class Budget:
    """Seconds for the whole run; ``clock`` is injected so tests can run without waiting."""

    total_s: float
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=-1.0)
    # held back from the stages' marks (``until``) for the last stage that needs a known
    # length: the confirmation's decisive runs (stages/confirm_served.py, decisive_reserve_s)
    reserved_s: float = 0.0

    def __post_init__(self) -> None:
        if self.started < 0:
            self.started = self.clock()

    def spent(self) -> float:
        return self.clock() - self.started

    def left(self) -> float:
        return max(0.0, self.total_s - self.spent())

    def allows(self, need_s: float) -> bool:
        return self.left() >= need_s

    def until(self, fraction: float) -> float:
        """Seconds left before ``fraction`` of the total budget less ``reserved_s`` is spent (a
        stage's mark, so one stage cannot starve the ones after it)."""
        return max(0.0, (self.total_s - self.reserved_s) * fraction - self.spent())

    def share(self, fraction: float, cap: float | None = None) -> float:
        """``fraction`` of what is left, at most ``cap`` seconds."""
        value = self.left() * fraction
        return min(value, cap) if cap is not None else value
