"""Canary gates: each one turns live counts into a verdict with its estimate, interval and
sample size, using the always-valid confidence sequences of rollout/stats.py.

    gate          events counted (per arm)                         fails when
    errors        answers with status 5xx or 429                   canary - stable > tol (sure)
    latency_p95   requests slower than the bucket bound nearest     canary - stable > tol (sure)
                  the stable's p90
    latency_p99   requests slower than the stable's p99 bucket     canary - stable > tol (sure)
    agreement     canary outputs disagreeing with the stable's     disagreement > max (sure)
                  on the same input (the scenario's floor metric)
    business      feedback outcomes equal to 1 (e.g. conversion)   canary - stable < -tol (sure)

"Sure" means the whole always-valid interval lies beyond the limit. False-alarm guarantee:
``alpha`` is split evenly over the configured gates (Bonferroni), and each gate's interval is
valid at every look at once, so for a canary no worse than the stable on every gate the chance
of *any* rollback over the whole rollout, however often it looks, is at most ``alpha``.
The latency gates compare tails at a threshold fixed from the stable's histogram before the
canary starts, so the threshold does not depend on the data being judged. The p95 gate's
threshold is the bucket bound with the share of the stable's requests above it nearest 10%
(P95_ANCHOR; observe.threshold_near), not its p95 bucket: for a canary whose p95 is 20%
higher, the share above the stable's p90 moves further, in units of its sampling noise, than
the share above its p95 (lognormal latencies, sigma 0.35: 10% -> 22% against 5% -> 13%), so
the gate decides with about half the samples (rollout/canary_plan.py sizes them); a change confined
to the far tail is the p99 gate's. Nearest, not the bound at or below the p90: latencies
crowded between two bounds put most requests above the lower one, and the share above it
then judges the median, not the tail. The stable's latency is its own traffic's: the router
replays canary answers to the stable for the agreement gate and keeps those replays out of the
stable's latency histograms (they arrive just after the canary's answer, a different traffic;
at 100% they were all the stable's samples, 31% of them over 2.5 ms against 4% of its own).
So at a step of 100% the stable answers no traffic of its own, and the OWN_ANSWER gates
(latency, and business, whose feedback follows answers) stand on the counts up to that step's
start (rollout/controller.py): they compare only answers both arms gave over the same period,
never the canary's full-weight answers with the stable's earlier ones, where a machine or load
that changed in between would decide. Errors and agreement, kept concurrent by the replays,
are judged to the end. A fixed count looked at again keeps the always-valid guarantee.
The guarantee assumes the counted events are independent draws (requests, and output rows,
from traffic whose mix does not change during the rollout); rows of one request, or traffic
that repeats the same inputs, are correlated, and the intervals are then narrower than they
should be.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from infertune.rollout.stats import Counts, Interval, confidence_sequence, difference_interval

GateName = Literal["errors", "latency_p95", "latency_p99", "agreement", "business"]
Verdict = Literal["pass", "fail", "wait"]
ALL_GATES: tuple[GateName, ...] = ("errors", "latency_p95", "latency_p99", "agreement",
                                   "business")
# the shadow answers replays only: no feedback reaches it
SHADOW_GATES: tuple[GateName, ...] = ("errors", "latency_p95", "latency_p99", "agreement")
# the gates whose stable side counts the stable's own answers only (the replays of canary
# answers are kept out of its latency histograms, and get no feedback): at 100% they get no
# new stable samples, so the controller stops their counts at that step's start
OWN_ANSWER: tuple[GateName, ...] = ("latency_p95", "latency_p99", "business")
P95_ANCHOR = 0.90  # the stable quantile whose bucket the p95 gate counts requests above
METHOD = ("beta-binomial mixture confidence sequences (always valid under continuous "
          "monitoring; Bonferroni over gates)")


class GateConfig(BaseModel):
    """Limits of the gates and the false-rollback level; validated when built."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    alpha: float = Field(default=0.05, gt=0, lt=1)  # total false-rollback level
    gates: tuple[GateName, ...] = ALL_GATES
    # a gate passes a step only once both arms have this many samples since the rollout began
    min_samples: int = Field(default=50, ge=1)
    error_tolerance: float = Field(default=0.01, ge=0, le=1)
    # 0.02: a +20% p95 (10% -> 22% above the anchor) is then caught in ~700 canary answers
    p95_tolerance: float = Field(default=0.02, ge=0, le=1)
    p99_tolerance: float = Field(default=0.02, ge=0, le=1)
    max_disagreement: float = Field(default=0.05, ge=0, lt=1)
    business_tolerance: float = Field(default=0.0, ge=0, le=1)

    @model_validator(mode="after")
    def _some_gates(self) -> GateConfig:
        if not self.gates or len(set(self.gates)) != len(self.gates):
            raise ValueError("gates must name at least one gate, each once")
        return self

    @property
    def alpha_per_gate(self) -> float:
        return self.alpha / len(self.gates)


@dataclass(frozen=True)
class ArmPair:
    canary: Counts
    stable: Counts


@dataclass(frozen=True)
class Evidence:
    """Counts since the rollout began (the OWN_ANSWER gates' only up to the start of a 100%
    step); None where a gate has nothing to read yet."""

    errors: ArmPair
    latency_p95: ArmPair | None = None
    latency_p99: ArmPair | None = None
    agreement: Counts | None = None  # events = disagreeing rows
    business: ArmPair | None = None  # events = outcomes equal to 1
    business_metric: str | None = None
    p95_threshold_s: float | None = None
    p99_threshold_s: float | None = None


@dataclass(frozen=True)
class GateResult:
    gate: GateName
    verdict: Verdict
    estimate: float  # canary - stable rate (agreement: the canary's disagreement rate)
    interval: Interval
    n_canary: int
    n_stable: int | None
    limit: float
    alpha: float
    what: str  # what the estimate measures, in words

    # Kept by hand, not Serial: the interval is written as a [low, high] list (canary.json,
    # shadow.json and the Flagger/Argo hooks are read so: gate["interval"][0]), where Serial
    # would write stats.Interval as an object.
    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "interval": self.interval.to_list()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GateResult:
        low, high = data["interval"]
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        return cls(**{**values, "interval": Interval(low, high)})

    def sentence(self) -> str:
        sizes = f"n={self.n_canary} canary" + (
            f", {self.n_stable} stable" if self.n_stable is not None else "")
        return (f"{self.gate}: {self.what} = {self.estimate:+.4f}, always-valid "
                f"{1 - self.alpha:.2%} interval [{self.interval.low:+.4f}, "
                f"{self.interval.high:+.4f}] ({sizes}; limit {self.limit:+.4f}) -> {self.verdict}")


def judge(evidence: Evidence, config: GateConfig) -> list[GateResult]:
    """One result per configured gate (``wait`` where it has too few samples to pass)."""
    alpha = config.alpha_per_gate
    results: list[GateResult] = []
    for gate in config.gates:
        if gate == "errors":
            results.append(_worse_if_higher(gate, evidence.errors, config.error_tolerance,
                                            alpha, config, "error rate, canary - stable"))
        elif gate in ("latency_p95", "latency_p99"):
            pair = evidence.latency_p95 if gate == "latency_p95" else evidence.latency_p99
            threshold = (evidence.p95_threshold_s if gate == "latency_p95"
                         else evidence.p99_threshold_s)
            tol = config.p95_tolerance if gate == "latency_p95" else config.p99_tolerance
            what = (f"share slower than {threshold * 1000:g} ms, canary - stable"
                    if threshold is not None else "tail share, canary - stable")
            results.append(_worse_if_higher(gate, pair, tol, alpha, config, what))
        elif gate == "agreement":
            results.append(_agreement(evidence.agreement, alpha, config))
        else:
            metric = evidence.business_metric or "business metric"
            results.append(_worse_if_lower(gate, evidence.business, config.business_tolerance,
                                           alpha, config, f"{metric} rate, canary - stable"))
    return results


def _empty(gate: GateName, limit: float, alpha: float, what: str) -> GateResult:
    return GateResult(gate, "wait", 0.0, Interval(-1.0, 1.0), 0, 0, limit, alpha, what)


def _worse_if_higher(gate: GateName, pair: ArmPair | None, tolerance: float, alpha: float,
                     config: GateConfig, what: str) -> GateResult:
    if pair is None:
        return _empty(gate, tolerance, alpha, what)
    interval = difference_interval(pair.canary, pair.stable, alpha)
    verdict = _verdict(interval.low > tolerance, pair, config)
    return GateResult(gate, verdict, pair.canary.rate - pair.stable.rate, interval,
                      pair.canary.n, pair.stable.n, tolerance, alpha, what)


def _worse_if_lower(gate: GateName, pair: ArmPair | None, tolerance: float, alpha: float,
                    config: GateConfig, what: str) -> GateResult:
    if pair is None:
        return _empty(gate, -tolerance, alpha, what)
    interval = difference_interval(pair.canary, pair.stable, alpha)
    verdict = _verdict(interval.high < -tolerance, pair, config)
    return GateResult(gate, verdict, pair.canary.rate - pair.stable.rate, interval,
                      pair.canary.n, pair.stable.n, -tolerance, alpha, what)


def _verdict(sure_worse: bool, pair: ArmPair, config: GateConfig) -> Verdict:
    if sure_worse:
        return "fail"
    enough = min(pair.canary.n, pair.stable.n) >= config.min_samples
    return "pass" if enough else "wait"


def _agreement(counts: Counts | None, alpha: float, config: GateConfig) -> GateResult:
    what = "share of outputs disagreeing with the stable's"
    if counts is None:
        return GateResult("agreement", "wait", 0.0, Interval(0.0, 1.0), 0, None,
                          config.max_disagreement, alpha, what)
    interval = confidence_sequence(counts, alpha)
    if interval.low > config.max_disagreement:
        verdict: Verdict = "fail"
    else:
        verdict = "pass" if counts.n >= config.min_samples else "wait"
    return GateResult("agreement", verdict, counts.rate, interval, counts.n, None,
                      config.max_disagreement, alpha, what)


def overall(results: list[GateResult], required: tuple[GateName, ...]) -> Verdict:
    """fail if any gate fails; pass once every required gate passes; else wait."""
    if any(r.verdict == "fail" for r in results):
        return "fail"
    by_gate = {r.gate: r.verdict for r in results}
    if all(by_gate.get(g) == "pass" for g in required if g in by_gate):
        return "pass"
    return "wait"
