"""The autoscaling policy of `infertune serve --engine ray`: Ray Serve's queue-length rule,
raised while the replicas refuse traffic.

    desired = max(ongoing / target,  n / (1 - r))   while r > 0, else ongoing / target

``ongoing / target`` is Ray's own rule (requests queued and running over target_ongoing_requests
per replica). It alone cannot see an overload that is shed: with the router's queue bounded
(max_queued_requests) and each replica refusing what its deadline cannot hold, the count of
ongoing requests stops growing at what the replicas hold within their deadlines, which can sit
below the target when the replicas run slower than measured (a shared host, a proxy taking a
core). So each replica also reports r, the share of the predict requests reaching it that it
refused (503/429) since its last report (``InfertuneReplica.record_autoscaling_stats``); with
n replicas answering a share 1 - r of what reaches them, carrying all of it takes n / (1 - r)
of them (a lower bound: what Ray's router refused at its queue bound never reached a replica).
Ray applies the plan's delays and the min/max bounds to the result, as for its own rule.

Ray imports this module on its controller by the path in POLICY_PATH, so it imports nothing of
infertune's beyond this file.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # ray is an optional extra; the hook is only ever called by Ray itself
    from ray.serve.config import AutoscalingContext

REFUSED_SHARE = "infertune_refused_share"
POLICY_PATH = "infertune.serve.engines.shed_policy:shedding_policy"
MAX_SHARE = 0.99  # a replica refusing everything still answers its refusals: cap n / (1 - r)


def desired_replicas(current: int, ongoing: float, target: float,
                     refused_shares: Iterable[float]) -> float:
    """The replicas wanted (before Ray's delays and bounds), by the module's rule."""
    if current <= 0:
        return 0.0
    by_queue = ongoing / target
    shares = [min(MAX_SHARE, max(0.0, s)) for s in refused_shares]
    refused = sum(shares) / len(shares) if shares else 0.0
    if refused <= 0.0:
        return by_queue  # nothing refused: Ray's rule alone, down as well as up
    return max(by_queue, current / (1.0 - refused))


def shedding_policy(ctx: AutoscalingContext) -> tuple[float, dict[str, Any]]:
    """Ray Serve's custom policy hook (``AutoscalingContext`` in, replicas and state out)."""
    # The returned state is Ray's ``policy_state`` mapping (Dict[str, Any] in Ray's hook
    # signature, handed back to the next call); this policy keeps none, so it is always {}.
    current = int(ctx.current_num_replicas)
    if current == 0:
        return float(ctx.target_num_replicas), {}
    metrics = ctx.aggregated_metrics or {}
    shares = metrics.get(REFUSED_SHARE, {}).values()
    return desired_replicas(current, float(ctx.total_num_requests),
                            float(ctx.config.get_target_ongoing_requests()), shares), {}
