"""The cost ceiling (``constraints.cost_ceiling_usd_per_1k``): the goodput one instance must
hold to be within it, and configurations over it ordered after those that fit. The policy sweep
(policy_sweep.py), the confirmation as served (confirm.py) and report/run_ceiling.py use it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def ceiling_goodput_rps(cost_per_hour_usd: float | None,
                        ceiling_usd_per_1k: float | None) -> float | None:
    """The goodput (requests/s within the SLO) one instance must hold for its cost per 1,000
    requests to be within the ceiling: cost per hour / (3.6 x ceiling), since 1,000 requests at
    goodput g take 1000 / (3600 g) hours. None when either fact is not stated."""
    if cost_per_hour_usd is None or ceiling_usd_per_1k is None or ceiling_usd_per_1k <= 0:
        return None
    return cost_per_hour_usd / (3.6 * ceiling_usd_per_1k)


def fits_ceiling(goodput_rps: float | None, cost_per_hour_usd: float | None,
                 ceiling_usd_per_1k: float | None) -> bool | None:
    """Within the cost ceiling at this goodput? No goodput at the SLO costs without limit, so it
    is over; None when the ceiling or the cost per hour is not stated."""
    need = ceiling_goodput_rps(cost_per_hour_usd, ceiling_usd_per_1k)
    if need is None:
        return None
    return goodput_rps is not None and goodput_rps >= need


def ceiling_first(items: Sequence[T], goodput: Callable[[T], float | None],
                  cost_per_hour_usd: float | None,
                  ceiling_usd_per_1k: float | None) -> list[T]:
    """``items`` in their order, except that those over the cost ceiling go after all that fit
    it: a configuration over the ceiling wins only where nothing measured fits (the report then
    says so and what would fit)."""
    fits = [fits_ceiling(goodput(it), cost_per_hour_usd, ceiling_usd_per_1k) for it in items]
    order = sorted(range(len(items)), key=lambda i: (fits[i] is False, i))
    return [items[i] for i in order]
