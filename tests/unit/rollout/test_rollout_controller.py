"""The canary controller on a simulated server (simulated clock, seeded draws): an equal canary
is promoted, a degraded one rolled back at the step and by the gate that caught it; a stable
with no traffic is a clear error; PromQL counts read like /metrics ones."""

from __future__ import annotations

import json

import httpx
import pytest

from infertune.errors import ConfigError
from infertune.rollout.canary_sim import ArmModel, SimulatedRollout
from infertune.rollout.controller import CanaryController, StepPlan
from infertune.rollout.gates import GateConfig
from infertune.rollout.observe import PROMQL, PrometheusMetrics


def _run(canary: ArmModel, seed: int = 3, **plan: object):
    sim = SimulatedRollout(ArmModel(), canary, seed=seed)
    controller = CanaryController(sim, sim, GateConfig(), StepPlan(**plan),  # type: ignore[arg-type]
                                  clock=sim.clock, sleep=sim.sleep)
    return sim, controller.run("canary")


def test_an_equal_canary_is_promoted_after_every_step() -> None:
    sim, outcome = _run(ArmModel())
    assert outcome.decision == "promoted"
    assert [s.weight for s in outcome.steps] == [1, 5, 25, 50, 100]
    assert all(s.verdict == "pass" and s.canary_answers >= 200 for s in outcome.steps)
    assert sim.actions[-1] == "promote" and sim.state().stable == "canary"
    # the p95 gate's threshold: the largest bound at or below the stable's p90 (15.7 ms for a
    # median of 10 ms, sigma 0.35); the p99 gate's: the first bound at or above its p99
    assert outcome.thresholds_s == {"p95": 0.015, "p99": 0.025}


def test_disagreeing_outputs_are_rolled_back_early_by_the_agreement_gate() -> None:
    sim, outcome = _run(ArmModel(disagreement=0.3))
    assert outcome.decision == "rolled_back"
    assert outcome.caught_at is not None and outcome.caught_at <= 5
    assert "agreement" in outcome.reason and "interval" in outcome.reason
    failed = [g for g in outcome.steps[-1].gates if g.verdict == "fail"]
    assert [g.gate for g in failed] == ["agreement"]
    assert failed[0].interval.low > 0.05
    assert sim.actions[-1] == "rollback" and sim.state().canary is None
    assert json.loads(json.dumps(outcome.to_dict()))["decision"] == "rolled_back"


def test_a_slow_canary_is_caught_by_a_latency_gate() -> None:
    _, outcome = _run(ArmModel(latency_median_s=0.03))
    assert outcome.decision == "rolled_back"
    assert {g.gate for g in outcome.steps[-1].gates if g.verdict == "fail"} & {
        "latency_p95", "latency_p99"}


def test_a_step_without_enough_traffic_times_out_and_rolls_back() -> None:
    _, outcome = _run(ArmModel(), min_step_samples=10_000, step_timeout_s=30)
    assert outcome.decision == "rolled_back"
    assert outcome.steps[-1].verdict == "timeout" and "no decision within 30 s" in outcome.reason


def test_wrong_release_and_no_baseline_traffic_are_clear_errors() -> None:
    sim = SimulatedRollout(ArmModel(), ArmModel(), rate_rps=0.0)
    controller = CanaryController(sim, sim, GateConfig(), StepPlan(baseline_timeout_s=5),
                                  clock=sim.clock, sleep=sim.sleep)
    with pytest.raises(ConfigError, match="server's canary is 'canary', not 'other'"):
        controller.run("other")
    with pytest.raises(ConfigError, match="baseline needs 100"):
        controller.run("canary")
    with pytest.raises(ConfigError, match="steps must rise"):
        StepPlan(steps=(50, 5))


def test_prometheus_source_reads_summed_series() -> None:
    answers = {
        PROMQL["infertune_requests_total"]: [({"release": "a", "status": "200"}, 120),
                                             ({"release": "a", "status": "500"}, 3)],
        PROMQL["infertune_request_seconds_bucket"]: [({"release": "a", "le": "0.01"}, 100),
                                                     ({"release": "a", "le": "+Inf"}, 123)],
    }

    def handler(request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        result = [{"metric": m, "value": [0, str(v)]} for m, v in answers.get(query, [])]
        return httpx.Response(200, json={"status": "success",
                                         "data": {"resultType": "vector", "result": result}})

    client = httpx.Client(base_url="http://prom", transport=httpx.MockTransport(handler))
    snap = PrometheusMetrics(client).snapshot()
    assert (snap.of("a").requests, snap.of("a").errors) == (123, 3)
    assert snap.of("a").over(0.01).events == 23

    failing = httpx.Client(base_url="http://prom", transport=httpx.MockTransport(
        lambda r: httpx.Response(400, json={"status": "error", "error": "parse error"})))
    with pytest.raises(ConfigError, match="parse error"):
        PrometheusMetrics(failing).snapshot()
