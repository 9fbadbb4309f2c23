"""Generic ranking: impact per unit of effort, within a risk budget. Used by advise (estimated
impacts) and optimize (measured ones); the caller says how to read impact, effort and risk from
its items, so nothing here knows about knowledge entries or variants.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

Level = Literal["low", "medium", "high"]
LEVELS: tuple[Level, ...] = ("low", "medium", "high")
# Relative cost of an effort level: a high-effort change must promise about four times the gain
# of a low-effort one to rank above it (weeks of work against an afternoon).
EFFORT_WEIGHT: dict[str, float] = {"low": 1.0, "medium": 2.0, "high": 4.0}

T = TypeVar("T")


@dataclass(frozen=True)
class Ranked(Generic[T]):
    item: T
    score: float
    within_risk_budget: bool


def rank(
    items: Sequence[T],
    impact: Callable[[T], float],
    effort: Callable[[T], Level],
    risk: Callable[[T], Level],
    risk_budget: Level = "medium",
) -> list[Ranked[T]]:
    """Order ``items`` by ``impact(item) / EFFORT_WEIGHT[effort(item)]``, highest first; items
    whose risk exceeds ``risk_budget`` come after all items within it. Ties keep input order,
    so the result is deterministic."""
    budget = LEVELS.index(risk_budget)
    scored = [
        Ranked(item=it, score=impact(it) / EFFORT_WEIGHT[effort(it)],
               within_risk_budget=LEVELS.index(risk(it)) <= budget)
        for it in items
    ]
    order = sorted(range(len(scored)),
                   key=lambda i: (not scored[i].within_risk_budget, -scored[i].score, i))
    return [scored[i] for i in order]
