"""The canary controller: move traffic in steps, judge the gates on live data, promote or roll
back.

    baseline   weight 0; wait until the stable has answered ``baseline_samples`` requests, and
               fix the latency thresholds (gates.P95_ANCHOR's and the p99 bucket) from them;
               with a ``Sizing`` also measure the request rate (at least ``rate_window_s``)
    plan       with a ``Sizing``: the steps and per-step samples sized from that rate so each
               step can catch the configured effects in time (rollout/canary_plan.py); a plan that
               cannot decide in time is refused before any traffic reaches the canary
    step W%    set the weight; every ``poll_s`` read the counts since the rollout began and
               judge the gates (rollout/gates.py); any gate sure to be worse -> roll back at
               once; every required gate passing with ``min_step_samples`` new canary answers
               in this step -> next step; ``step_timeout_s`` without that -> roll back
    step 100%  the same, but the stable answers no traffic of its own: the latency gates (and
               business) stand on the counts up to the start of this step, the snapshot taken
               just before the weight moved to 100, while errors and agreement, kept
               concurrent by the replays, are judged on the counts to ``now``
    shadow     with ``shadow_gate``: before any step, the server's shadow release (the
               canary's build, answering mirrored copies of the stable's traffic) judged on
               errors, latency and agreement like a step at weight 0; a failure rolls back
    promote    after the last step

The rule: a gate compares only answers both arms gave over the same period. The stable's own
answers stop at 100% (the router keeps its replays of canary answers out of its latency
histograms), so comparing the canary's 100%-step latency with the stable's earlier answers
would judge the machine's drift or a change of load, not the release (CI saw a faithful
release rolled back so). Flagger and Argo Rollouts likewise run no comparative analysis at
full weight. The latency gates' power therefore comes from the steps below 100% (what
canary_plan.py sizes them for), and a first step of 100% with latency gates is refused: it
leaves them nothing to compare. A latency change that shows only under all the traffic is not
a gate's to judge (no concurrent control exists); errors and agreement still are.

Not stratified by step: each arm's counts are pooled over the steps below 100%. Comparing step
by step would remove a drift between those steps too, but the union-bound intervals of
stats.py add their widths over strata (2 x steps confidence sequences instead of 2), so it
would need about as many more samples as steps; the default plan at 20 req/s has one step
below 100% (20%), where pooling and stratifying agree.

The statistics are always-valid, so looking at every poll keeps the false-rollback rate of a
canary no worse than the stable at or below ``GateConfig.alpha`` (see gates.py); a frozen
count looked at again changes nothing. Every decision carries each gate's estimate, interval
and sample sizes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from infertune.errors import ConfigError
from infertune.rollout.analysis import judge_counts
from infertune.rollout.canary_plan import CanaryPlan, Sizing, measure_traffic, plan_for
from infertune.rollout.gates import (
    METHOD,
    P95_ANCHOR,
    SHADOW_GATES,
    GateConfig,
    GateName,
    GateResult,
)
from infertune.rollout.observe import MetricsSource, Snapshot, threshold, threshold_near
from infertune.serial import Serial
from infertune.serve.routing import RoutingState

REQUIRED: tuple[GateName, ...] = ("errors", "latency_p95", "latency_p99", "agreement")


class PlanRefused(ConfigError):
    """No plan decides in time at the measured rate (the canary stays at weight 0)."""


class RoutingControl(Protocol):
    """What the controller needs from a server (rollout/client.py speaks it over HTTP)."""

    def state(self) -> RoutingState: ...

    def change(self, action: str, *, weight: float | None = None,
               reason: str | None = None) -> RoutingState: ...


@dataclass(frozen=True)
class StepPlan:
    steps: tuple[float, ...] = (1.0, 5.0, 25.0, 50.0, 100.0)
    min_step_samples: int = 200  # new canary answers before a step may pass
    baseline_samples: int = 100
    poll_s: float = 1.0
    step_timeout_s: float = 300.0
    baseline_timeout_s: float = 120.0
    business_metric: str | None = None

    def __post_init__(self) -> None:
        if not self.steps or any(not 0 < s <= 100 for s in self.steps) or \
                list(self.steps) != sorted(self.steps):
            raise ConfigError(f"steps must rise within (0, 100]; got {list(self.steps)}; "
                              "pass e.g. --steps 1,5,25,50,100")


@dataclass
class StepReport(Serial):
    weight: float
    verdict: Literal["pass", "fail", "timeout"]
    seconds: float
    canary_answers: int  # in this step
    gates: list[GateResult]


@dataclass
class CanaryOutcome(Serial):
    release: str
    decision: Literal["promoted", "rolled_back"]
    reason: str
    method: str
    alpha: float
    thresholds_s: dict[str, float | None]
    steps: list[StepReport] = field(default_factory=list)
    rollback_seconds: float | None = None  # how long the rollback call took to answer
    plan: CanaryPlan | None = None  # the sized plan (None: the steps were fixed in advance)

    @property
    def caught_at(self) -> float | None:
        return self.steps[-1].weight if self.decision == "rolled_back" and self.steps else None


class CanaryController:
    def __init__(self, control: RoutingControl, source: MetricsSource, config: GateConfig,
                 plan: StepPlan, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 on_look: Callable[[float, list[GateResult]], None] | None = None,
                 sizing: Sizing | None = None,
                 on_plan: Callable[[CanaryPlan], None] | None = None,
                 shadow_gate: bool = False) -> None:
        self.control, self.source, self.config, self.plan = control, source, config, plan
        self.clock, self.sleep = clock, sleep
        self.on_look, self.on_plan = on_look, on_plan
        self.sizing = sizing
        self.shadow_gate = shadow_gate
        self.step_timeout_s: float | None = None  # set: wins over the plan's sized timeout
        self.required = tuple(g for g in REQUIRED if g in config.gates)
        given = sizing.steps if sizing is not None else plan.steps  # None: planned, below 100
        latency = [g for g in self.required if g.startswith("latency")]
        if given and given[0] >= 100 and latency:
            raise ConfigError(
                f"a first step of 100% leaves the stable no traffic of its own to compare "
                f"{' and '.join(latency)} with (the latency gates stand on the steps below "
                "100%); start lower, e.g. --steps 20,100")

    def run(self, release: str) -> CanaryOutcome:
        state = self.control.state()
        if state.canary != release:
            raise ConfigError(f"the server's canary is {state.canary!r}, not {release!r}; start "
                              f"it with infertune serve --stable {state.stable} --canary "
                              f"{release}")
        stable = state.stable
        self.control.change("weight", weight=0.0, reason="canary: baseline")
        began, before = self.clock(), self.source.snapshot()
        start = self._baseline(stable)
        sized = self._size(before, start, stable, self.clock() - began)
        p95 = threshold_near(start.of(stable), P95_ANCHOR, self.plan.baseline_samples)
        p99 = threshold(start.of(stable), 0.99, self.plan.baseline_samples)
        outcome = CanaryOutcome(release, "promoted", "", METHOD, self.config.alpha,
                                {"p95": p95, "p99": p99}, plan=sized)
        if self.shadow_gate:
            report = self._shadow(state.shadow, stable, p95, p99)
            outcome.steps.append(report)
            if report.verdict != "pass":
                return self._roll_back(outcome, report)
        for weight in self.plan.steps:
            # taken before the weight moves: every own answer counted in it was given while
            # both arms had traffic
            own_until = self.source.snapshot() if weight >= 100 else None
            self.control.change("weight", weight=weight, reason=f"canary step {weight:g}%")
            report = self._step(weight, start, release, stable, p95, p99, own_until)
            outcome.steps.append(report)
            if report.verdict != "pass":
                return self._roll_back(outcome, report)
        lines = "; ".join(g.sentence() for g in outcome.steps[-1].gates)
        outcome.reason = f"every required gate passed at each step ({lines})"
        self.control.change("promote", reason=outcome.reason)
        return outcome

    def _size(self, before: Snapshot, start: Snapshot, stable: str,
              seconds: float) -> CanaryPlan | None:
        """With a Sizing: the plan from the measured rate, adopted (or refused)."""
        if self.sizing is None:
            return None
        traffic = measure_traffic(before.of(stable), start.of(stable), seconds,
                                  self.sizing.effects.p95_slowdown, self.plan.baseline_samples)
        plan = plan_for(traffic, self.config, self.sizing, self.required)
        if self.on_plan is not None:
            self.on_plan(plan)
        if plan.refusal is not None:
            raise PlanRefused(f"no canary plan decides in time: {plan.refusal} (the canary "
                              "stays at 0%)")
        self.plan = replace(self.plan, steps=plan.steps, min_step_samples=plan.step_samples,
                            step_timeout_s=self.step_timeout_s or
                            plan.step_timeout_s(self.plan.poll_s))
        return plan

    def _baseline(self, stable: str) -> Snapshot:
        began = self.clock()
        window = self.sizing.rate_window_s if self.sizing is not None else 0.0
        while True:
            snap = self.source.snapshot()
            if snap.of(stable).requests >= self.plan.baseline_samples and \
                    self.clock() - began >= window:
                return snap
            if self.clock() - began > self.plan.baseline_timeout_s:
                raise ConfigError(
                    f"the stable release {stable} answered {snap.of(stable).requests} requests "
                    f"in {self.plan.baseline_timeout_s:g} s; a baseline needs "
                    f"{self.plan.baseline_samples}: send traffic, or lower --baseline-samples")
            self.sleep(self.plan.poll_s)

    def _step(self, weight: float, start: Snapshot, canary: str, stable: str,
              p95: float | None, p99: float | None,
              own_until: Snapshot | None = None) -> StepReport:
        """One step's looks; ``own_until`` (a 100% step): where the latency and business
        gates' counts stop."""
        began = self.clock()
        at_step = self.source.snapshot().of(canary).requests
        while True:
            self.sleep(self.plan.poll_s)
            now = self.source.snapshot()
            verdict, results = judge_counts(start, now, canary, stable, p95_s=p95, p99_s=p99,
                                            config=self.config, required=self.required,
                                            business_metric=self.plan.business_metric,
                                            own_until=own_until)
            if self.on_look is not None:
                self.on_look(weight, results)
            answers = now.of(canary).requests - at_step
            elapsed = self.clock() - began
            if verdict == "fail":
                return StepReport(weight, "fail", elapsed, answers, results)
            if verdict == "pass" and answers >= self.plan.min_step_samples:
                return StepReport(weight, "pass", elapsed, answers, results)
            if elapsed > self.plan.step_timeout_s:
                return StepReport(weight, "timeout", elapsed, answers, results)

    def _shadow(self, shadow: str | None, stable: str, p95: float | None,
                p99: float | None) -> StepReport:
        """The shadow gate: the shadow's mirrored rows judged like a step at weight 0 (the
        canary gets no traffic until they pass); its rows count as its answers."""
        if shadow is None:
            raise ConfigError("--shadow-gate needs a shadow release on the server; serve "
                              "with --shadow NAME (the canary's build)")
        began, start = self.clock(), self.source.snapshot()
        required = tuple(g for g in SHADOW_GATES if g in self.config.gates)
        while True:
            self.sleep(self.plan.poll_s)
            now = self.source.snapshot()
            verdict, results = judge_counts(start, now, shadow, stable, p95_s=p95, p99_s=p99,
                                            config=self.config, required=required)
            rows = now.of(shadow).rows - start.of(shadow).rows
            elapsed = self.clock() - began
            if verdict == "fail" or (verdict == "pass" and rows >= self.plan.min_step_samples):
                return StepReport(0.0, verdict, elapsed, rows, results)
            if elapsed > self.plan.step_timeout_s:
                return StepReport(0.0, "timeout", elapsed, rows, results)

    def _roll_back(self, outcome: CanaryOutcome, report: StepReport) -> CanaryOutcome:
        where = "the shadow gate" if report.weight == 0 else f"step {report.weight:g}%"
        if report.verdict == "fail":
            failed = [g.sentence() for g in report.gates if g.verdict == "fail"]
            why = f"at {where}: " + "; ".join(failed)
        else:
            waiting = [g.sentence() for g in report.gates if g.verdict == "wait"]
            why = (f"at {where}: no decision within "
                   f"{self.plan.step_timeout_s:g} s ({report.canary_answers} canary answers; "
                   + "; ".join(waiting) + ")")
        began = self.clock()
        self.control.change("rollback", reason=why)
        outcome.rollback_seconds = self.clock() - began
        outcome.decision, outcome.reason = "rolled_back", why
        return outcome
