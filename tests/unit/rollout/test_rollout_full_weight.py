"""At a step of 100% the stable answers no traffic of its own, so the gates that compare the
stable's own answers (latency, business) stand on the counts up to that step's start, and the
gates kept concurrent by the replays (errors, agreement) go on judging: a faithful canary is
not rolled back because the machine got slower during the 100% step, a canary slower in the
steps both arms shared still is, and errors or disagreement that start at 100% are still
caught (simulated server, simulated clock, seeded draws)."""

from __future__ import annotations

import pytest

from infertune.errors import ConfigError
from infertune.rollout.canary_plan import (
    Effects,
    Sizing,
    Traffic,
    gate_sizes,
    plan_for,
    two_arm_samples,
)
from infertune.rollout.canary_sim import ArmModel, SimulatedRollout
from infertune.rollout.controller import REQUIRED, CanaryController, StepPlan
from infertune.rollout.gates import GateConfig, GateResult
from infertune.rollout.stats import Counts

FAST = ArmModel(conversion=0.10)  # median 10 ms, sigma 0.35
SLOWER_MACHINE = ArmModel(latency_median_s=0.015, conversion=0.10)  # the same release, x1.5
OWN = ("latency_p95", "latency_p99", "business")


def _run(canary: ArmModel, from_weight: dict[float, dict[str, ArmModel]], *,
         steps: tuple[float, ...] = (20.0, 100.0), seed: int = 4,
         config: GateConfig | None = None):
    sim = SimulatedRollout(FAST, canary, rate_rps=50.0, seed=seed, history_s=60,
                           from_weight=from_weight)
    looks: list[tuple[float, Counts]] = []  # (weight, the canary's answers over 15 ms so far)

    def look(weight: float, _: list[GateResult]) -> None:
        looks.append((weight, sim.snapshot().of("canary").over(0.015)))

    controller = CanaryController(sim, sim, config or GateConfig(),
                                  StepPlan(steps=steps, min_step_samples=300),
                                  clock=sim.clock, sleep=sim.sleep, on_look=look)
    return looks, controller.run("canary")


def _counts(gates: list[GateResult], names: tuple[str, ...]) -> dict[str, tuple]:
    return {g.gate: (g.n_canary, g.n_stable, g.estimate, g.interval) for g in gates
            if g.gate in names}


def test_a_faithful_canary_is_promoted_though_the_machine_slowed_during_the_100pct_step() -> None:
    # both arms 1.5x slower from the 100% step on: the canary's answers there are slow, the
    # stable's (all from 20% and before) fast; compared, they would roll back a faithful release
    looks, outcome = _run(FAST, {100.0: {"stable": SLOWER_MACHINE, "canary": SLOWER_MACHINE}})
    assert outcome.decision == "promoted", outcome.reason
    at20, at100 = outcome.steps
    assert (at20.weight, at100.weight) == (20.0, 100.0) and at100.canary_answers >= 300
    # the latency (and business) gates at 100% read the counts of the last look at 20%
    # exactly: the snapshot is taken at that look's simulated time, before the weight moves
    assert _counts(at100.gates, OWN) == _counts(at20.gates, OWN)
    assert all("up to the 100% step" in g.what for g in at100.gates if g.gate in OWN)
    # the canary's 100%-step answers really were slow: about half of them over the p95
    # threshold (15 ms, the slower machine's median), against about a tenth before
    assert outcome.thresholds_s["p95"] == 0.015
    last20 = [c for w, c in looks if w == 20.0][-1]
    end = looks[-1][1]
    assert last20.rate < 0.2 and (end.events - last20.events) / (end.n - last20.n) > 0.4


def test_a_canary_slower_in_the_shared_steps_is_still_rolled_back() -> None:
    slow = ArmModel(latency_median_s=0.013, conversion=0.10)
    _, outcome = _run(slow, {100.0: {"stable": SLOWER_MACHINE, "canary": SLOWER_MACHINE}})
    assert outcome.decision == "rolled_back" and outcome.caught_at == 20.0
    failed = {g.gate for g in outcome.steps[-1].gates if g.verdict == "fail"}
    assert "latency_p95" in failed and failed <= {"latency_p95", "latency_p99"}


@pytest.mark.parametrize(("broken", "gate"), [
    (ArmModel(error_rate=0.2, conversion=0.10), "errors"),
    (ArmModel(disagreement=0.3, conversion=0.10), "agreement"),
])
def test_errors_and_disagreement_starting_at_100pct_are_still_caught(broken: ArmModel,
                                                                    gate: str) -> None:
    _, outcome = _run(FAST, {100.0: {"canary": broken}})
    assert outcome.decision == "rolled_back" and outcome.caught_at == 100.0
    assert [g.gate for g in outcome.steps[-1].gates if g.verdict == "fail"] == [gate]
    at20, at100 = outcome.steps
    judged = {g.gate: g.n_canary for g in at100.gates}
    before = {g.gate: g.n_canary for g in at20.gates}
    assert judged[gate] > before[gate]  # counted on past the 100% step's start
    assert _counts(at100.gates, OWN) == _counts(at20.gates, OWN)


def test_a_first_step_of_100pct_with_latency_gates_is_refused() -> None:
    with pytest.raises(ConfigError, match="no traffic of its own.*--steps 20,100"):
        _run(FAST, {}, steps=(100.0,))
    # without the latency gates a switch straight to 100% is judged on errors and agreement
    _, outcome = _run(FAST, {}, steps=(100.0,),
                      config=GateConfig(gates=("errors", "agreement")))
    assert outcome.decision == "promoted" and [s.weight for s in outcome.steps] == [100.0]


TRAFFIC = Traffic(rate_rps=20.0, seconds=20.0, requests=400, error_rate=0.001,
                  p95_share=0.12, slowed_share=0.26)


def test_the_latency_gate_is_sized_from_the_first_step_never_from_100pct() -> None:
    config = GateConfig()
    plan = plan_for(TRAFFIC, config, Sizing(), REQUIRED)
    assert plan.steps == (20.0, 100.0)
    # straight from 20% to 100%: the latency gate's samples are the 20% step's, the stable's
    # own answers 4 for each canary answer
    latency = next(s for s in plan.sizes if s.gate == "latency_p95")
    assert latency.samples == two_arm_samples(0.12, 0.26, config.p95_tolerance,
                                              config.alpha_per_gate, 0.95, 4.0)
    assert latency.samples is not None and latency.samples <= plan.step_samples
    # a step of 100% gives the latency gate nothing: not sized from it, and the plan says so
    at_full = next(s for s in gate_sizes(TRAFFIC, config, Effects(), REQUIRED, 100.0)
                   if s.gate == "latency_p95")
    assert at_full.samples is None and "no answers of its own" in at_full.why
    given = plan_for(TRAFFIC, config, Sizing(steps=(100.0,)), REQUIRED)
    assert given.refusal is None and given.warnings[0].startswith("latency_p95 cannot")
