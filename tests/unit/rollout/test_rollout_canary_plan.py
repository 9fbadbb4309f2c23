"""The canary plan sized from the traffic: the samples each gate needs for its effect, the
steps chosen to decide in time at the measured rate, a refusal naming the rate or time that
would fit, explicit steps winning, and the controller running the plan on a simulated server
(simulated clock, seeded draws)."""

from __future__ import annotations

import math

import pytest

from infertune.rollout.canary_plan import (
    Effects,
    Sizing,
    Traffic,
    one_arm_samples,
    plan_for,
    shifted_share,
    two_arm_samples,
)
from infertune.rollout.canary_sim import ArmModel, SimulatedRollout
from infertune.rollout.controller import REQUIRED, CanaryController, PlanRefused, StepPlan
from infertune.rollout.gates import GateConfig
from infertune.rollout.stats import Counts, confidence_sequence

# a stable measured at 20 req/s: 0.1% errors, 12% of requests above the p95 gate's threshold,
# 26% above it once 1.2x slower
TRAFFIC = Traffic(rate_rps=20.0, seconds=20.0, requests=400, error_rate=0.001,
                  p95_share=0.12, slowed_share=0.26)


def test_samples_are_the_smallest_that_detect_the_effect_at_the_power() -> None:
    n = one_arm_samples(0.10, 0.05, 0.01, 0.95)
    assert n == 737
    # at n the 5% quantile of the disagreeing rows puts the interval above the limit; at n - 1
    # it does not (the search's answer is the boundary, not a round number)
    from scipy.stats import binom
    for size, above in ((n, True), (n - 1, False)):
        low = confidence_sequence(Counts(size, int(binom.ppf(0.05, size, 0.10))), 0.01).low
        assert (low > 0.05) is above
    assert one_arm_samples(0.05, 0.05, 0.01, 0.95) is None  # the effect is the limit itself
    assert two_arm_samples(0.1, 0.11, 0.02, 0.01, 0.95, 5.0) is None  # within the tolerance
    wide = two_arm_samples(0.12, 0.26, 0.02, 0.01, 0.95, 5.0)
    many_stable = two_arm_samples(0.12, 0.26, 0.02, 0.01, 0.95, 50.0)
    assert wide is not None and many_stable is not None and many_stable < wide


def test_shifted_share_interpolates_on_log_latency() -> None:
    # 100 requests: 50 within 10 ms, 80 within 20 ms, all within 40 ms
    buckets = {0.01: 50.0, 0.02: 80.0, 0.04: 100.0, math.inf: 100.0}
    assert shifted_share(buckets, 0.02, 1.0) == pytest.approx(0.20)
    # 20 ms / 2**0.5 sits halfway between 10 and 20 ms on a log scale: 65 within
    assert shifted_share(buckets, 0.02, 2**0.5) == pytest.approx(0.35)
    assert shifted_share(buckets, 0.04, 2.0) == pytest.approx(0.20)


def test_plan_at_20_rps_takes_the_smallest_first_step_that_decides_in_time() -> None:
    plan = plan_for(TRAFFIC, GateConfig(), Sizing(), REQUIRED)
    assert plan.refusal is None
    sizes = {s.gate: s.samples for s in plan.sizes}
    assert sizes["agreement"] == 737 and plan.step_samples == max(sizes.values())  # type: ignore[type-var]
    # 737 answers at 1-10% and then 50%, 100% would take longer than 90% of 300 s
    assert plan.steps == (20.0, 100.0)
    assert plan.step_seconds == pytest.approx([737 / 4.0, 737 / 20.0])
    assert plan.expected_s == pytest.approx(20 + 737 / 4 + 737 / 20)
    assert "expected time to a decision 241 s" in plan.lines()[-1]
    # five times the traffic: the gentler ladder from 5% fits
    busy = plan_for(Traffic(100.0, 20.0, 2000, 0.001, 0.12, 0.26), GateConfig(), Sizing(),
                    REQUIRED)
    assert busy.steps == (5.0, 50.0, 100.0) and busy.refusal is None


def test_too_little_traffic_is_refused_with_the_rate_and_time_that_would_do() -> None:
    slow = Traffic(5.0, 20.0, 100, 0.001, 0.12, 0.26)
    plan = plan_for(slow, GateConfig(), Sizing(), REQUIRED)
    assert plan.refusal is not None
    n = plan.step_samples
    need_rate = n * (100 / 20 + 1) / (0.9 * 300 - 20)
    assert f"send at least {need_rate:.1f} req/s" in plan.refusal
    assert f"--decide-within-s {math.ceil(20 + n / 1.0 + n / 5.0)}" in plan.refusal
    # explicit steps win: the plan runs them, sized, and says how long they will take
    given = plan_for(slow, GateConfig(), Sizing(steps=(10.0, 50.0, 100.0)), REQUIRED)
    assert given.refusal is None and given.steps == (10.0, 50.0, 100.0) and given.explicit
    assert given.step_samples == n
    assert "given steps 10% ~" in given.lines()[-1]


def test_a_latency_gate_that_cannot_see_its_effect_in_time_is_a_warning() -> None:
    # the latency tolerance is wider than the share a 1.2x slower canary would add
    plan = plan_for(TRAFFIC, GateConfig(p95_tolerance=0.2), Sizing(), REQUIRED)
    assert plan.refusal is None and plan.step_samples == 737  # sized from the others
    assert len(plan.warnings) == 1 and plan.warnings[0].startswith("latency_p95 cannot")
    assert any(line.startswith("WARNING: latency_p95") for line in plan.lines())
    # a shift that is visible, but only with far more answers than 300 s hold at 20 req/s
    barely = Traffic(20.0, 20.0, 400, 0.001, 0.112, 0.141)
    slow = plan_for(barely, GateConfig(), Sizing(), REQUIRED)
    assert slow.refusal is None and slow.step_samples == 737 and len(slow.warnings) == 1
    # the agreement gate blind (its effect at its limit): refused, since it sizes the plan
    refused = plan_for(TRAFFIC, GateConfig(), Sizing(effects=Effects(disagreement=0.05)),
                       REQUIRED)
    assert refused.refusal is not None and "agreement" in refused.refusal
    with pytest.raises(ValueError, match="p95_slowdown > 1"):
        Effects(p95_slowdown=1.0)


def _rollout(canary: ArmModel, rate: float, seed: int = 5):
    sim = SimulatedRollout(ArmModel(), canary, rate_rps=rate, seed=seed, history_s=300)
    plans: list[object] = []
    controller = CanaryController(sim, sim, GateConfig(), StepPlan(), clock=sim.clock,
                                  sleep=sim.sleep, sizing=Sizing(), on_plan=plans.append)
    return sim, controller, plans


def test_the_controller_runs_the_sized_plan_at_20_rps() -> None:
    sim, controller, plans = _rollout(ArmModel(), 20.0)
    outcome = controller.run("canary")
    assert outcome.decision == "promoted" and outcome.plan is plans[0]
    assert [s.weight for s in outcome.steps] == list(outcome.plan.steps) == [20.0, 100.0]
    assert all(s.canary_answers >= outcome.plan.step_samples for s in outcome.steps)
    assert sim.now < 300  # decided within five minutes of simulated time
    assert outcome.to_dict()["plan"]["steps"] == [20.0, 100.0]

    sim, controller, _ = _rollout(ArmModel(disagreement=0.10), 20.0)
    bad = controller.run("canary")
    assert bad.decision == "rolled_back" and bad.caught_at == 20.0
    assert [g.gate for g in bad.steps[-1].gates if g.verdict == "fail"] == ["agreement"]


def test_a_plan_refused_leaves_the_canary_at_zero() -> None:
    sim, controller, plans = _rollout(ArmModel(), 3.0)
    with pytest.raises(PlanRefused, match="send at least .* req/s.*stays at 0%"):
        controller.run("canary")
    assert sim.actions == ["weight"] and sim.state().canary_weight == 0.0
    assert len(plans) == 1


def test_the_rate_is_the_routers_arrivals_when_it_counts_them() -> None:
    from infertune.rollout.canary_plan import measure_traffic
    from infertune.rollout.observe import ReleaseCounts, parse_exposition

    # a lagging server: 400 requests arrived in 20 s, 250 of them answered
    before = ReleaseCounts(requests=100, routed=100)
    after = ReleaseCounts(requests=350, routed=500, buckets={0.01: 350.0, math.inf: 350.0})
    assert measure_traffic(before, after, 20.0, 1.2, 100).rate_rps == 20.0
    answered = measure_traffic(ReleaseCounts(requests=100), ReleaseCounts(requests=350), 20.0,
                               1.2, 100)
    assert answered.rate_rps == 12.5 and answered.p95_share is None  # no histogram to size from
    text = ('# TYPE infertune_routed_requests_total counter\n'
            'infertune_routed_requests_total{release="a"} 7.0\n')
    assert parse_exposition(text).of("a").routed == 7


def test_the_shadow_gate_holds_the_canary_back_until_the_shadow_passes() -> None:
    def run(shadow: ArmModel):
        sim = SimulatedRollout(ArmModel(), ArmModel(), rate_rps=50.0, seed=2, history_s=60,
                               shadow=shadow)
        plan = StepPlan(steps=(10.0, 100.0), min_step_samples=300)
        outcome = CanaryController(sim, sim, GateConfig(), plan, clock=sim.clock,
                                   sleep=sim.sleep, shadow_gate=True).run("canary")
        return sim, outcome

    sim, good = run(ArmModel())
    assert good.decision == "promoted" and [s.weight for s in good.steps] == [0.0, 10.0, 100.0]
    assert good.steps[0].verdict == "pass" and good.steps[0].canary_answers >= 300
    sim, bad = run(ArmModel(disagreement=0.2))
    assert bad.decision == "rolled_back" and [s.weight for s in bad.steps] == [0.0]
    assert bad.reason.startswith("at the shadow gate: agreement")
    assert "weight" in sim.actions and all(a != "promote" for a in sim.actions)
    assert sim.state().canary is None  # the canary never got traffic, and is gone
