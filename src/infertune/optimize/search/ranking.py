"""Generic ranking: impact per unit of effort, within a risk budget. Used by optimize's choice of
variant (measured impacts) and by the report builders for advise and optimize, which import
it from here; the caller says how to read impact, effort and risk from its items, so
nothing here knows about knowledge entries or variants. It sits in optimize/ because the
search decides with it, and report/ (a later layer) may import optimize/, not the reverse.
The cost ceiling's ordering is in served/ceiling.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from infertune.config import Scenario

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


def risk_budget(sc: Scenario) -> Level:
    """Short rollout windows take only low-risk changes; otherwise medium."""
    window = sc.constraints.rollout_window_days
    return "low" if window is not None and window < 7 else "medium"


def inside_slo(sc: Scenario) -> bool | None:
    """True when every stated target (latency and token-level) is met by the stated current
    figure; None if unknown."""
    targets = {**sc.slo.targets(), **sc.slo.token_targets()}
    now = sc.current
    current = {"p50": now.p50_ms, "p95": now.p95_ms, "p99": now.p99_ms,
               "ttft_p95": now.ttft_p95_ms, "ttft_p99": now.ttft_p99_ms,
               "itl_p95": now.itl_p95_ms, "itl_p99": now.itl_p99_ms}
    pairs = [(value, v) for k, v in targets.items() if (value := current[k]) is not None]
    if not targets or not pairs:
        return None
    return all(value <= target for value, target in pairs)


def objective_key(inside: bool | None, slo: dict[str, float] | None = None) -> str:
    """The latency figure options are ranked on. Inside the SLO the question is cost (p50 ~
    service time); outside it, the SLO's own percentile (its highest, e.g. p99 for "p95 <= 50,
    p99 <= 80"), else p95. One rule for optimize's choice of variant and for both reports."""
    if inside:
        return "p50"
    named = [k for k in (slo or {}) if k in ("p50", "p95", "p99")]
    return max(named, key=lambda k: int(k[1:])) if named else "p95"
