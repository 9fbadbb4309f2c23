"""A/B analysis of a binary business metric (conversion, retention) per arm.

Each arm's rate gets the always-valid confidence sequence of rollout/stats.py at alpha/2 and
the difference (treatment - control) their union-bound interval at alpha, so the report may be
read every day and the decision stopped on whenever it is clear, without inflating the false
decision rate past alpha. The sample size shown for a minimum detectable effect is the usual
fixed-horizon two-proportion formula (normal approximation, two-sided alpha, power 1 - beta),
labelled as such: a guide to how long to run, not the rule the decision uses (the always-valid
interval needs more samples than that to reach the same width).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

from infertune.errors import ConfigError
from infertune.rollout.stats import Counts, confidence_sequence, difference_interval
from infertune.serial import Serial

Decision = Literal["treatment better", "control better", "no decision yet"]
METHOD = ("beta-binomial mixture confidence sequences (always valid when checked repeatedly); "
          "difference by the union bound")


@dataclass(frozen=True)
class Arm(Serial):
    release: str
    n: int
    ones: int
    rate: float
    interval: list[float]


@dataclass(frozen=True)
class AbReport(Serial):
    metric: str
    control: Arm
    treatment: Arm
    difference: float  # treatment - control
    difference_interval: list[float]
    alpha: float
    decision: Decision
    mde: float
    power: float
    needed_per_arm: int | None  # fixed-horizon estimate; None when the control has no data
    method: str = METHOD

    def sentence(self) -> str:
        c, t = self.control, self.treatment
        lo, hi = self.difference_interval
        need = (f"; a fixed-horizon test needs about {self.needed_per_arm} per arm to detect "
                f"{self.mde:+.3f} with power {self.power:.0%} (normal-approximation formula)"
                if self.needed_per_arm else "")
        return (f"{self.metric}: {c.release} {c.rate:.4f} (n={c.n}) vs {t.release} {t.rate:.4f} "
                f"(n={t.n}); difference {self.difference:+.4f}, always-valid "
                f"{1 - self.alpha:.0%} interval [{lo:+.4f}, {hi:+.4f}] -> {self.decision}{need}")


def fixed_horizon_n(base_rate: float, mde: float, alpha: float, power: float) -> int:
    """Per-arm n for a two-sided two-proportion z-test to detect ``mde`` from ``base_rate``."""
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    other = min(max(base_rate + mde, 0.0), 1.0)
    variance = base_rate * (1 - base_rate) + other * (1 - other)
    return max(1, math.ceil(z * z * variance / (mde * mde)))


def ab_report(counts: dict[str, Counts], metric: str, control: str, treatment: str, *,
              alpha: float = 0.05, mde: float = 0.01, power: float = 0.8) -> AbReport:
    for arm in (control, treatment):
        if arm not in counts:
            seen = ", ".join(sorted(counts)) or "none"
            raise ConfigError(f"no {metric!r} feedback for release {arm!r} (releases with "
                              f"feedback: {seen}); POST /v1/feedback with the X-Request-Id of "
                              "its answers, or name other arms")
    if not 0 < mde < 1 or not 0 < power < 1 or not 0 < alpha < 1:
        raise ConfigError("mde, power and alpha must each lie in (0, 1); e.g. --mde 0.01")
    a, b = counts[control], counts[treatment]
    diff = difference_interval(b, a, alpha)
    if diff.low > 0:
        decision: Decision = "treatment better"
    elif diff.high < 0:
        decision = "control better"
    else:
        decision = "no decision yet"
    return AbReport(metric, _arm(control, a, alpha), _arm(treatment, b, alpha),
                    b.rate - a.rate, diff.to_list(), alpha, decision, mde, power,
                    fixed_horizon_n(a.rate, mde, alpha, power) if a.n else None)


def _arm(release: str, counts: Counts, alpha: float) -> Arm:
    interval = confidence_sequence(counts, alpha / 2)
    return Arm(release, counts.n, counts.events, counts.rate, interval.to_list())
