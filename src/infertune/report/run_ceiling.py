"""What would fit the scenario's cost ceiling, for the report's SLO check.

A cost per 1,000 requests on one instance is its cost per hour over the requests it serves
within the SLO (DESIGN.md: at goodput), so the ceiling is a goodput floor: cost per hour /
(3.6 x ceiling). The sweep already ranks policies over the ceiling after those that fit it
(optimize/served/ceiling.py, ceiling_first); when the recommended configuration is still over it,
nothing measured fits, and these lines say what would: the goodput needed against the one
measured, a swept policy whose simulated goodput fits (an estimate), or the cost per hour of a
machine at which the measured goodput would fit.
"""

from __future__ import annotations

from infertune.optimize.served.ceiling import ceiling_goodput_rps
from infertune.optimize.served.policy_sweep import SweepResult
from infertune.report.schema import SloCheck


def ceiling_advice(check: SloCheck, sweep: SweepResult,
                   cost_per_hour_usd: float | None) -> list[str]:
    """Sentences for ``check.what_would`` when the ceiling is stated and not met (or cannot be
    checked); none when it is met or not stated."""
    if check.cost_ceiling is None or check.cost_ceiling.value is None:
        return []
    ceiling = check.cost_ceiling.value
    if cost_per_hour_usd is None:
        return [f"the cost ceiling of ${ceiling:g} per 1,000 requests cannot be checked: the "
                "scenario states no deployment.cost_per_hour_usd"]
    if check.within_ceiling is not False:
        return []
    need = ceiling_goodput_rps(cost_per_hour_usd, ceiling)
    assert need is not None
    goods = [p.goodput.value for p in check.points if p.goodput is not None
             and p.goodput.value is not None]
    got = max(goods, default=0.0)
    out = [f"to fit the cost ceiling of ${ceiling:g} per 1,000 requests at the scenario's "
           f"${cost_per_hour_usd:g} per hour, one instance must serve at least {need:.1f} "
           f"requests/s within the SLO ({cost_per_hour_usd:g} / (3.6 x {ceiling:g})); the "
           f"recommended configuration measured {got:.1f} requests/s, so it is over the ceiling"]
    fits = [r for r in sweep.ranked if r.goodput_rps is not None and r.goodput_rps >= need]
    if fits:
        best = fits[0]
        out.append(f"estimate: policy {best.policy_id} fits by the simulator's goodput of "
                   f"{best.goodput_rps:.1f} requests/s (not confirmed by a load test here)")
    else:
        out.append(f"none of the {len(sweep.ranked)} leading policies swept fits it (the best "
                   f"simulated goodput is {max((r.goodput_rps or 0.0) for r in sweep.ranked):.1f}"
                   " requests/s)")
    if got > 0:
        out.append(f"at the measured {got:.1f} requests/s it would fit on a machine costing at "
                   f"most ${got * 3.6 * ceiling:.4g} per hour, or with a configuration that "
                   f"serves {need / got:.2g}x the measured goodput here")
    return out
