"""A simulated routing server for judging the controller itself: the same CanaryController,
gates and statistics, fed by requests drawn from stated distributions instead of HTTP.

Each arm has a lognormal latency (median, sigma), an error rate, a share of outputs that
disagree with the stable's, and optionally a conversion rate. Time is simulated: ``sleep(s)``
sends ``rate_rps * s`` requests, split between the arms by the current canary weight, and
every canary answer is replayed to the stable (as the router does), which compares the
outputs and counts as a stable request, but not as a latency sample (the router keeps those
replays out of the stable's latency histograms). ``history_s``: seconds of traffic the stable
answered before the rollout began; ``shadow``: a shadow release answering a replay of every
stable answer, compared like the canary's; ``from_weight``: arms that behave differently from
the step of a weight on (a machine that gets slower during the 100% step, slowing both arms
alike; a release that breaks only under all the traffic). The simulator judges nothing
itself: the controller's rules (at 100% the latency gates stand on the counts up to that
step's start, see rollout/controller.py) apply to it as to a server.
benchmarks/canary_stats.py and the controller's unit tests use it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from infertune.rollout.observe import ReleaseCounts, Snapshot
from infertune.rollout.stats import Counts
from infertune.serve.prometheus_metrics import LATENCY_BUCKETS
from infertune.serve.routing import RoutingState

BOUNDS = np.array([*LATENCY_BUCKETS, math.inf])


@dataclass(frozen=True)
class ArmModel:
    latency_median_s: float = 0.010
    latency_sigma: float = 0.35
    error_rate: float = 0.001
    disagreement: float = 0.0
    conversion: float | None = None


@dataclass
class _Tally:
    requests: int = 0
    errors: int = 0
    per_bucket: np.ndarray = field(default_factory=lambda: np.zeros(len(BOUNDS), np.int64))
    rows: int = 0
    disagreeing: int = 0
    shown: int = 0  # answers that could get feedback
    converted: int = 0

    def counts(self, metric: str) -> ReleaseCounts:
        cumulative = np.cumsum(self.per_bucket)
        feedback = {metric: Counts(self.shown, self.converted)} if self.shown else {}
        return ReleaseCounts(self.requests, self.errors,
                             {float(b): float(c) for b, c in zip(BOUNDS, cumulative, strict=True)},
                             self.rows, self.disagreeing, feedback)


class SimulatedRollout:
    """RoutingControl and MetricsSource at once, with a simulated clock."""

    def __init__(self, stable: ArmModel, canary: ArmModel, *, rate_rps: float = 200.0,
                 seed: int = 0, stable_name: str = "stable", canary_name: str = "canary",
                 metric: str = "conversion", history_s: float = 0.0,
                 shadow: ArmModel | None = None, shadow_name: str = "shadow",
                 from_weight: Mapping[float, Mapping[str, ArmModel]] | None = None) -> None:
        self.models = {stable_name: stable, canary_name: canary}
        # weight -> {release: the model it follows from the step of that weight on}
        self.from_weight = dict(from_weight or {})
        self.routing = RoutingState(stable=stable_name, canary=canary_name,
                                    shadow=shadow_name if shadow is not None else None)
        if shadow is not None:
            self.models[shadow_name] = shadow
        self.rate_rps = rate_rps
        self.rng = np.random.default_rng(seed)
        self.metric = metric
        self.now = 0.0
        self.tallies = {name: _Tally() for name in self.models}
        self.actions: list[str] = []
        # the stable's traffic before the rollout began (a canary starts against a release
        # that has been serving): its latency shares are what the plan is sized from
        self._serve(stable_name, int(self.rng.poisson(rate_rps * history_s)), answered=True)

    # RoutingControl
    def state(self) -> RoutingState:
        return self.routing

    def change(self, action: str, *, weight: float | None = None,
               reason: str | None = None) -> RoutingState:
        self.actions.append(action)
        if action == "weight" and weight is not None:
            self.models.update(self.from_weight.get(weight, {}))
            self.routing = self.routing.model_copy(update={"canary_weight": weight})
        elif action == "rollback":
            self.routing = self.routing.model_copy(update={"canary": None, "canary_weight": 0})
        elif action == "promote":
            assert self.routing.canary is not None
            self.routing = RoutingState(stable=self.routing.canary,
                                        previous_stable=self.routing.stable)
        return self.routing

    # MetricsSource
    def snapshot(self) -> Snapshot:
        return Snapshot({name: t.counts(self.metric) for name, t in self.tallies.items()})

    # the clock the controller runs on
    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        n = int(self.rng.poisson(self.rate_rps * seconds))
        s = self.routing
        to_canary = 0
        if s.canary is not None:
            to_canary = int(self.rng.binomial(n, s.canary_weight / 100))
            self._serve(s.canary, to_canary, answered=True)
            self._compare(s.canary, to_canary)
        # the stable answers its share and replays every canary answer
        self._serve(s.stable, n - to_canary, answered=True)
        self._serve(s.stable, to_canary, answered=False, timed=False)
        if s.shadow is not None:  # every stable answer replayed to the shadow and compared
            self._serve(s.shadow, n - to_canary, answered=False)
            self._compare(s.shadow, n - to_canary)

    def _serve(self, name: str, n: int, *, answered: bool, timed: bool = True) -> None:
        if n == 0:
            return
        model, tally = self.models[name], self.tallies[name]
        if timed:
            latency = model.latency_median_s * np.exp(model.latency_sigma *
                                                      self.rng.standard_normal(n))
            tally.per_bucket += np.bincount(np.searchsorted(BOUNDS, latency),
                                            minlength=len(BOUNDS))
        tally.requests += n
        tally.errors += int(self.rng.binomial(n, model.error_rate))
        if answered and model.conversion is not None:
            tally.shown += n
            tally.converted += int(self.rng.binomial(n, model.conversion))

    def _compare(self, name: str, n: int) -> None:
        tally = self.tallies[name]
        tally.rows += n
        tally.disagreeing += int(self.rng.binomial(n, self.models[name].disagreement))
