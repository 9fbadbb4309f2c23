"""The ranking advise and optimize share (impact per effort within a risk budget). It lives in
optimize/search/ranking.py, where the search chooses a variant with it; report/ imports it from
there because optimize/ is the earlier layer."""

from infertune.optimize.search.ranking import (
    EFFORT_WEIGHT,
    LEVELS,
    Level,
    Ranked,
    inside_slo,
    rank,
    risk_budget,
)

__all__ = ["EFFORT_WEIGHT", "LEVELS", "Level", "Ranked", "inside_slo", "rank", "risk_budget"]
