"""A canary plan sized from the traffic it will see: how many canary answers each step needs so
that its gates can catch the effects the team cares about, and whether the steps fit the time
allowed at the measured request rate.

    effects    what a step must be able to catch (Effects): the canary's latency x1.2 (p95
               +20%), outputs disagreeing with the stable's at twice the agreement limit, and
               an error rate 5 points above the stable's
    sizing     for each required gate, the smallest canary sample n at which the gate's
               always-valid interval (gates.py, stats.py) excludes its limit with probability
               ``power`` when the effect is real: the canary's events at the (1 - power)
               quantile of Binomial(n, p1), the stable's at their expected count. The gates
               look after every poll, so a real effect is usually caught before n; n is what a
               step waits for before it may pass
    rates      the stable's rates come from the baseline the controller just measured (error
               rate; for latency, the share above the p95 threshold and the share above
               threshold / slowdown, which is what a uniformly slower canary would show,
               interpolated between bucket bounds on a log scale)
    steps      the first step is the smallest of 1, 2, 5, 10, 20% whose plan (that step, then
               50% and 100%, n new canary answers each) is expected to decide within
               90% of ``decide_within_s`` at the measured rate (else the same first steps
               straight to 100%); the canary never exceeds 20% before its gates had n
               answers to judge. None fits: the plan is refused, naming the rate or the
               time that would fit. The latency gate's power depends on the stable's latency
               shape: where no sample that fits the time lets it catch the slowdown, that is a
               warning (the plan is sized from the errors and agreement gates), not a refusal

The stable's error sample grows by every request it answers plus every canary answer replayed
to it (the router compares outputs that way), so during a step at weight w it holds about
n x 100 / w; its latency sample by its own answers only (the router keeps the replays out of
its latency histograms), about n x (100 - w) / w. At 100% it answers none, and the controller
judges the latency gates on the counts up to that step's start (rollout/controller.py): their
power comes from the steps below 100%, and every plan here has one, so each gate is sized at
the first step, whose n answers alone must suffice (a plan straight from it to 100% has no
other; a ladder through 50% adds more). A step of 100% sizes no latency gate: where it comes
first (explicit steps), the plan warns that it is sized from the errors and agreement gates,
and the controller refuses to run it while latency gates are required.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from scipy.stats import binom

from infertune.rollout.gates import P95_ANCHOR, GateConfig, GateName
from infertune.rollout.observe import ReleaseCounts, threshold_near
from infertune.rollout.stats import Counts, confidence_sequence, difference_interval
from infertune.serial import Serial

FIRST_STEPS = (1.0, 2.0, 5.0, 10.0, 20.0)
# tried in order: the gentler ladder first, for every first step, then straight to 100%
LATER_STEPS = ((50.0, 100.0), (100.0,))
# a plan fits when its expected time is within this share of the time allowed: the rest
# absorbs Poisson arrivals and the looks' granularity
FIT = 0.9
MAX_SAMPLES = 200_000  # a gate needing more than this per step cannot decide in practice


@dataclass(frozen=True)
class Effects:
    """What every step must be able to detect, with probability ``power``."""

    p95_slowdown: float = 1.2  # canary latency x this: p95 +20%
    disagreement: float | None = None  # None: twice GateConfig.max_disagreement
    error_increase: float = 0.05  # canary error rate - stable's
    # 0.95 at the step's full sample: the gates look at every poll, so a real effect is caught
    # by then in a little more than 95% of rollouts
    power: float = 0.95

    def __post_init__(self) -> None:
        if self.p95_slowdown <= 1 or not 0 < self.error_increase < 1 or \
                not 0.5 <= self.power < 1:
            raise ValueError("effects need p95_slowdown > 1, 0 < error_increase < 1 and "
                             "0.5 <= power < 1")


@dataclass(frozen=True)
class Sizing:
    """How `canary` sizes its plan; explicit ``steps`` or ``step_samples`` win."""

    effects: Effects = Effects()
    decide_within_s: float = 300.0
    # the baseline measures the rate (and the stable's latency shares the latency gate is
    # sized from) at least this long: 400 requests at 20 req/s
    rate_window_s: float = 20.0
    steps: tuple[float, ...] | None = None
    step_samples: int | None = None


@dataclass(frozen=True)
class Traffic(Serial):
    """What the baseline saw of the stable before any canary traffic."""

    rate_rps: float
    seconds: float
    requests: int  # in the measuring window
    error_rate: float  # over the stable's whole history
    p95_share: float | None  # share above the p95 threshold
    slowed_share: float | None  # share a slowed-down copy would put above it


@dataclass(frozen=True)
class GateSize(Serial):
    gate: GateName
    samples: int | None  # None: this gate cannot detect the effect at any size
    why: str


@dataclass
class CanaryPlan(Serial):
    """The sized plan; ``expected_s`` is written beside the fields (ignored on reading)."""

    DERIVED = ("expected_s",)

    traffic: Traffic
    steps: tuple[float, ...]
    step_samples: int
    step_seconds: list[float]  # expected time of each step for a release that passes
    sizes: list[GateSize] = field(default_factory=list)
    refusal: str | None = None  # why no plan decides in time (None: it does)
    explicit: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def expected_s(self) -> float:
        return self.traffic.seconds + sum(self.step_seconds)

    def step_timeout_s(self, poll_s: float) -> float:
        """Twice the slowest step's expected time, plus ten looks: Poisson arrivals rarely
        stretch a step of a few hundred answers by more than a tenth."""
        return 2 * max(self.step_seconds) + 10 * poll_s

    def lines(self) -> list[str]:
        t = self.traffic
        head = (f"measured {t.rate_rps:.2f} req/s over {t.seconds:.1f} s ({t.requests} "
                f"requests at weight 0)")
        sized = "; ".join(s.why for s in self.sizes)
        steps = ", ".join(f"{w:g}% ~{s:.0f} s" for w, s in zip(self.steps, self.step_seconds,
                                                                 strict=True))
        source = "given" if self.explicit else "planned"
        return [head, f"per-step canary answers {self.step_samples} ({sized})",
                *(f"WARNING: {w}" for w in self.warnings),
                f"{source} steps {steps}; expected time to a decision {self.expected_s:.0f} s"]


def shifted_share(buckets: dict[float, float], bound: float, slowdown: float) -> float:
    """The share above ``bound`` of the same requests made ``slowdown`` times slower: the share
    above bound / slowdown, interpolated on log(latency) between the bucket bounds."""
    total = buckets.get(math.inf, 0.0)
    if total <= 0:
        return 0.0
    point = bound / slowdown
    finite = sorted(b for b in buckets if math.isfinite(b))
    below = [b for b in finite if b <= point]
    above = [b for b in finite if b > point]
    if not below:  # under the first bound: linear from zero
        return 1.0 - buckets[above[0]] * point / above[0] / total
    lo = below[-1]
    if not above:
        return 1.0 - buckets[lo] / total
    hi = above[0]
    frac = math.log(point / lo) / math.log(hi / lo)
    within = buckets[lo] + frac * (buckets[hi] - buckets[lo])
    return max(0.0, 1.0 - within / total)


def measure_traffic(before: ReleaseCounts, after: ReleaseCounts, seconds: float,
                    slowdown: float, min_samples: int) -> Traffic:
    # arrivals where the router counts them: a server that lags under load answers fewer
    # requests a second than it is offered, and the canary will be offered, not answered
    if after.routed is not None and before.routed is not None:
        requests = max(0, after.routed - before.routed)
    else:
        requests = max(0, after.requests - before.requests)
    rate = requests / seconds if seconds > 0 else 0.0
    error_rate = after.errors / after.requests if after.requests else 0.0
    p95 = threshold_near(after, P95_ANCHOR, min_samples)
    if p95 is None:
        return Traffic(rate, seconds, requests, error_rate, None, None)
    total = after.buckets.get(math.inf, 0.0)
    share = 1.0 - after.buckets.get(p95, 0.0) / total
    return Traffic(rate, seconds, requests, error_rate, share,
                   shifted_share(after.buckets, p95, slowdown))


def _smallest_n(detects: object) -> int | None:
    """The smallest n with detects(n), by doubling then bisection (detection is monotone in n
    up to the binomial's discreteness, which moves the answer by a few samples at most)."""
    assert callable(detects)
    hi = 8
    while not detects(hi):
        hi *= 2
        if hi > MAX_SAMPLES:
            return None
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if detects(mid):
            hi = mid
        else:
            lo = mid
    return hi


def two_arm_samples(p0: float, p1: float, tolerance: float, alpha: float, power: float,
                    stable_ratio: float) -> int | None:
    """Canary samples at which difference_interval(...).low > tolerance with probability
    ``power`` when the canary's rate is p1 and the stable's p0 (stable_ratio x as many)."""
    if p1 - p0 <= tolerance:
        return None

    def detects(n: int) -> bool:
        events = int(binom.ppf(1 - power, n, p1))
        ns = max(1, round(n * stable_ratio))
        stable = Counts(ns, min(ns, round(ns * p0)))
        return difference_interval(Counts(n, events), stable, alpha).low > tolerance

    return _smallest_n(detects)


def one_arm_samples(p1: float, limit: float, alpha: float, power: float) -> int | None:
    if p1 <= limit:
        return None

    def detects(n: int) -> bool:
        events = int(binom.ppf(1 - power, n, p1))
        return confidence_sequence(Counts(n, events), alpha).low > limit

    return _smallest_n(detects)


def gate_sizes(traffic: Traffic, config: GateConfig, effects: Effects, required: tuple[
        GateName, ...], weight: float) -> list[GateSize]:
    """The canary samples each required gate needs at a step of ``weight`` percent."""
    alpha, power, ratio = config.alpha_per_gate, effects.power, 100.0 / weight
    sizes: list[GateSize] = []
    for gate in required:
        if gate == "errors":
            p0 = traffic.error_rate
            p1 = min(1.0, p0 + effects.error_increase)
            n = two_arm_samples(p0, p1, config.error_tolerance, alpha, power, ratio)
            sizes.append(GateSize(gate, n, f"errors {p0:.3%} -> {p1:.3%}: {_n(n)}"))
        elif gate == "latency_p95":
            q0, q1 = traffic.p95_share, traffic.slowed_share
            if q0 is None or q1 is None:
                sizes.append(GateSize(gate, None, "latency_p95: no p95 threshold from the "
                                      "baseline"))
                continue
            if weight >= 100:  # the controller stops the latency counts as 100% begins
                sizes.append(GateSize(gate, None, "latency_p95: a step of 100% leaves the "
                                      "stable no answers of its own to compare with"))
                continue
            own = ratio - 1.0  # the replays are not in its latency histogram
            n = two_arm_samples(q0, q1, config.p95_tolerance, alpha, power, own)
            sizes.append(GateSize(gate, n, f"latency_p95 x{effects.p95_slowdown:g}: share over "
                                  f"the threshold {q0:.3f} -> {q1:.3f}, tolerance "
                                  f"{config.p95_tolerance:g}: {_n(n)}"))
        elif gate == "agreement":
            d1 = effects.disagreement or min(0.99, 2 * config.max_disagreement)
            n = one_arm_samples(d1, config.max_disagreement, alpha, power)
            sizes.append(GateSize(gate, n, f"agreement {d1:.0%} disagreeing (limit "
                                  f"{config.max_disagreement:.0%}): {_n(n)}"))
    return sizes


def _n(n: int | None) -> str:
    return str(n) if n is not None else "never (the effect is within the gate's tolerance)"


def plan_for(traffic: Traffic, config: GateConfig, sizing: Sizing,
             required: tuple[GateName, ...]) -> CanaryPlan:
    """The plan: explicit steps as given, else the smallest first step that decides in time
    (``refusal`` says why none does)."""
    candidates = [sizing.steps] if sizing.steps else [
        (w, *later) for later in LATER_STEPS for w in FIRST_STEPS]
    plan: CanaryPlan | None = None
    for steps in candidates:
        sizes = gate_sizes(traffic, config, sizing.effects, required, steps[0])
        plan = _plan(traffic, steps, sizes, sizing)
        if plan.refusal is None:
            return plan
    assert plan is not None
    return plan


def _fits(traffic: Traffic, steps: tuple[float, ...], sizing: Sizing) -> float:
    """The most canary answers per step that the steps take within FIT x the time allowed:
    time = baseline + n / rate x sum(100 / w)."""
    room = FIT * sizing.decide_within_s - traffic.seconds
    return max(0.0, room) * traffic.rate_rps / sum(100 / w for w in steps)


def _plan(traffic: Traffic, steps: tuple[float, ...], sizes: list[GateSize],
          sizing: Sizing) -> CanaryPlan:
    explicit = sizing.steps is not None
    fits = _fits(traffic, steps, sizing)
    # the latency gate's power depends on the shape of the stable's latencies, which no plan
    # changes: where its effect lies within its tolerance on this traffic, or needs more
    # answers than the time allows, it still judges (and still rolls back what is surely
    # worse) but cannot promise to catch the configured slowdown: said, not refused. The
    # errors and agreement gates depend only on the configured effects and limits: they size
    # the plan, and their not fitting refuses it
    shaped = [s for s in sizes if s.gate.startswith("latency") and
              (s.samples is None or s.samples > fits)]
    sized = [s for s in sizes if s not in shaped]
    n = sizing.step_samples or max([s.samples or 1 for s in sized] or
                                   [max((s.samples or 1 for s in sizes), default=1)])
    rate = traffic.rate_rps
    seconds = [n / (w / 100 * rate) if rate > 0 else math.inf for w in steps]
    plan = CanaryPlan(traffic, steps, n, seconds, sizes, explicit=explicit)
    plan.warnings = [f"{s.gate} cannot promise to catch its effect on this traffic ({s.why}; "
                     f"{fits:.0f} answers per step fit in the time); the steps are sized from "
                     "the other gates" for s in shaped]
    blind = [s for s in sized if s.samples is None]
    if (blind or not sized) and sizing.step_samples is None:
        plan.refusal = ("no sample size lets these gates detect their effect: " +
                        "; ".join(s.why for s in blind or sizes) + "; widen the effects, lower "
                        "the tolerances, or pass --min-step-samples and --steps to run anyway")
    elif plan.expected_s > FIT * sizing.decide_within_s and not explicit:
        spread = n * sum(100 / w for w in steps)
        room = FIT * sizing.decide_within_s - traffic.seconds
        need_rate = spread / room if room > 0 else math.inf
        plan.refusal = (f"at {rate:.2f} req/s even a first step of {steps[0]:g}% needs "
                        f"~{plan.expected_s:.0f} s to decide ({n} canary answers per step), "
                        f"over --decide-within-s {sizing.decide_within_s:g}: send at least "
                        f"{need_rate:.1f} req/s, or pass --decide-within-s "
                        f"{math.ceil(plan.expected_s)}, or choose --steps yourself")
    return plan
