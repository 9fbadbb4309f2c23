"""The autoscaling plan's arithmetic, checked against values worked out by hand."""

from __future__ import annotations

import math

import pytest
from ray.serve._private.config import DeploymentConfig
from ray.serve.config import AutoscalingConfig, BackpressureConfig

from infertune.serve.engines.autoscale import (
    AutoscalePlan,
    Demand,
    Limits,
    ReplicaFacts,
    derive_plan,
    operating_point,
)

CURVE = {1: 10.0, 2: 12.0, 4: 16.0, 8: 30.0}


def facts(**changes: object) -> ReplicaFacts:
    base: dict[str, object] = dict(service_ms=CURVE, service_source="test curve",
                                   cold_start_s=10.0, cold_start_source="test",
                                   max_batch_size=8, max_wait_ms=2.0)
    return ReplicaFacts(**{**base, **changes})  # type: ignore[arg-type]


def test_target_is_littles_law_at_the_largest_batch_that_meets_the_slo() -> None:
    # W(b) = 2 + 2 S(b): 22, 26, 34, 62 ms; the 50 ms SLO admits b = 4
    plan = derive_plan(facts(), Demand(slo_ms=50.0, slo_source="p99 target"))
    # X = 4 / 16 ms = 250 inputs/s; L = 250 x 0.034 s = 8.5
    assert plan.target_ongoing_requests.value == 8.5
    assert plan.max_ongoing_requests.value == 17
    assert plan.replica_capacity_rps.value == 250.0
    assert "b*=4" in plan.target_ongoing_requests.reasoning
    assert "p99 target" in plan.target_ongoing_requests.reasoning
    # two inputs per request halve the requests a replica holds
    assert derive_plan(facts(inputs_per_request=2.0),
                       Demand(slo_ms=50.0)).target_ongoing_requests.value == 4.25


def test_a_measured_goodput_lowers_the_target() -> None:
    slow = facts(goodput_rps=40.0, goodput_source="load test")
    plan = derive_plan(slow, Demand(slo_ms=50.0))
    assert plan.target_ongoing_requests.value == 1.36  # 40 req/s x W(4) = 34 ms
    assert "load test" in plan.target_ongoing_requests.reasoning
    fast = derive_plan(facts(goodput_rps=1000.0, goodput_source="x"), Demand(slo_ms=50.0))
    assert fast.target_ongoing_requests.value == 8.5  # above the curve's X: the curve's L
    # no SLO: b* = 8, W = 62 ms: 40 x 0.062 = 2.48
    assert derive_plan(slow).target_ongoing_requests.value == 2.48


def test_operating_point_without_slo_and_with_an_impossible_one() -> None:
    point, why, warnings = operating_point(facts(max_batch_size=4), None)
    assert (point.batch, warnings) == (4, []) and "no SLO" in why
    point, _, warnings = operating_point(facts(), 15.0)
    assert point.batch == 1 and "22 ms > the 15 ms SLO" in warnings[0]
    plan = derive_plan(facts(), Demand(slo_ms=15.0))
    assert plan.warnings == warnings
    assert plan.target_ongoing_requests.value == pytest.approx(100 * 0.022)  # 2.2


def test_target_never_drops_below_one_request() -> None:
    plan = derive_plan(facts(service_ms={1: 1.0}, max_batch_size=1, max_wait_ms=0.0))
    assert plan.target_ongoing_requests.value == 2.0  # L = 1000/s x 2 ms
    slow = derive_plan(facts(service_ms={1: 1.0}, max_batch_size=1, max_wait_ms=0.0,
                             inputs_per_request=4.0))
    assert slow.target_ongoing_requests.value == 1.0  # 250 req/s x 2 ms = 0.5
    assert "raised to 1" in slow.target_ongoing_requests.reasoning


def test_delays_follow_the_cold_start_and_the_push_interval() -> None:
    plan = derive_plan(facts(cold_start_s=10.0), push_interval_s=0.5)
    assert plan.look_back_period_s.value == 10.0
    assert plan.upscale_delay_s.value == 1.0
    assert plan.downscale_delay_s.value == 10.0  # one cold start
    quick = derive_plan(facts(cold_start_s=0.4), push_interval_s=0.5)
    assert quick.look_back_period_s.value == 2.5  # 5 pushes beat the 2 s floor
    assert quick.downscale_delay_s.value == 5.0  # 5 x the 1 s upscale delay
    slow = derive_plan(facts(cold_start_s=100.0))  # Ray's default 10 s pushes
    assert slow.look_back_period_s.value == 50.0 and slow.upscale_delay_s.value == 20.0
    assert slow.downscale_delay_s.value == 100.0


def test_warm_pool_rides_the_fastest_ramp() -> None:
    # capacity 100 req/s measured; react = up 1 + look/2 5 + cold 10 = 16 s
    f = facts(goodput_rps=100.0, goodput_source="benchmark")
    ramp = derive_plan(f, Demand(mean_rps=100.0, peak_rps=1000.0, ramp_rps_per_s=10.0),
                       push_interval_s=0.5)
    assert ramp.min_replicas.value == 3  # reaches 100 + 10 x 16 = 260 req/s
    assert "260" in ramp.min_replicas.reasoning
    spiky = derive_plan(f, Demand(mean_rps=100.0, peak_rps=400.0, pattern="spiky"))
    assert spiky.min_replicas.value == 4  # a step to the peak: it must already be carried
    steady = derive_plan(f, Demand(mean_rps=150.0, peak_rps=150.0, pattern="steady"))
    assert steady.min_replicas.value == 2
    assert derive_plan(f).min_replicas.value == 1  # no traffic facts


def test_max_replicas_comes_from_the_cluster_and_the_cost_ceiling_not_the_forecast() -> None:
    # issue 29's demo: 60 req/s per replica, forecast peak 60, 2 CPUs, $0.10/h, $0.01 per 1k
    f = facts(goodput_rps=60.0, goodput_source="load test", timeout_ms=1000.0)
    demo = Demand(mean_rps=20.0, peak_rps=60.0, pattern="bursty")
    plan = derive_plan(f, demo, Limits(cluster_cpus=2.0, cost_per_hour_usd=0.10,
                                       cost_ceiling_usd_per_1k=0.01))
    assert (plan.min_replicas.value, plan.max_replicas.value) == (1, 2)
    why = plan.max_replicas.reasoning
    assert "2 CPUs hold 2 replicas" in why and "= 21 at the forecast peak" in why
    assert "the smaller, 2" in why and "sets only the warm pool" in why
    assert plan.warnings == []
    # the cost ceiling alone: 3.6 x 1000 x 0.005 / 2 = 9, below the forecast's 10
    g = facts(goodput_rps=100.0, goodput_source="benchmark")
    demand = Demand(mean_rps=100.0, peak_rps=1000.0, ramp_rps_per_s=1.0)
    costly = derive_plan(g, demand, Limits(cost_per_hour_usd=2.0, cost_ceiling_usd_per_1k=0.005))
    assert costly.max_replicas.value == 9
    assert any("needs 10 replicas but the cost ceiling pays for 9" in w for w in costly.warnings)
    small = derive_plan(g, demand, Limits(cluster_cpus=4.0, cpus_per_replica=1.0))
    assert small.max_replicas.value == 4
    assert any("needs 10 replicas but the cluster holds 4" in w for w in small.warnings)
    # a big cluster is not capped by the forecast
    assert derive_plan(g, demand, Limits(cluster_cpus=64.0, cpus_per_replica=2.0)
                       ).max_replicas.value == 32
    # nothing but the forecast known: the forecast's need, said to be a forecast cap
    blind = derive_plan(g, demand)
    assert blind.max_replicas.value == 10
    assert any("traffic above the forecast gets no more replicas" in w for w in blind.warnings)
    # no peak rate: as many as the cluster holds
    assert derive_plan(g, Demand(), Limits(cluster_cpus=2.0)).max_replicas.value == 2


def test_router_queue_is_bounded_by_what_the_warm_pool_serves_within_the_deadline() -> None:
    # b* = 4 at the 50 ms SLO: X = 250 req/s, a batch of 4 every 16 ms, max_ongoing 17: a full
    # replica holds ceil(17 / 4) + 1 = 6 batches, 2 + 6 x 16 = 98 ms. The policy's 200 ms:
    # floor(250 x min(0.2 - 0.098, 0.2 / 2)) = 25 in the router, drained in 25 / 250 = 0.1 s
    slow = derive_plan(facts(timeout_ms=200.0), Demand(slo_ms=50.0))
    assert slow.deadline_s.value == 0.2 and "timeout_ms 200" in slow.deadline_s.reasoning
    assert slow.max_queued_requests.value == 25
    assert "6 batches of 4" in slow.max_queued_requests.reasoning
    assert slow.backpressure_retry_after_s.value == 0.1
    # the replica cannot see the router's wait, so it serves with what is left of the deadline
    assert slow.replica_deadline_s.value == 0.1 and slow.warnings == []
    # a warm pool of 2 drains twice as fast; two proxies share the bound
    pool = Demand(slo_ms=50.0, mean_rps=500.0, peak_rps=500.0, pattern="steady")
    two = derive_plan(facts(timeout_ms=200.0), pool)
    assert two.min_replicas.value == 2 and two.max_queued_requests.value == 50
    assert two.replica_deadline_s.value == 0.1  # 0.2 - 50 / 500
    shared = derive_plan(facts(timeout_ms=200.0), pool, Limits(proxies=2))
    assert shared.max_queued_requests.value == 25 and "/ 2 proxies" in (
        shared.max_queued_requests.reasoning)
    assert shared.backpressure_retry_after_s.value == 0.1  # 25 x 2 / 500
    # no timeout_ms: the runtime's default deadline max(50, 2 + 3 x S(8) 30) = 92 ms, shorter
    # than a full replica's 98 ms: Ray's smallest bound, 1, waits 4 ms
    plan = derive_plan(facts(), Demand(slo_ms=50.0))
    assert plan.deadline_s.value == 0.092 and "S(8)" in plan.deadline_s.reasoning
    assert plan.max_queued_requests.value == 1 and "raised to 1" in (
        plan.max_queued_requests.reasoning)
    assert plan.replica_deadline_s.value == 0.088
    # a deadline that leaves a replica less than one batch after the router: kept whole, warned
    tight = derive_plan(facts(timeout_ms=20.0), Demand(slo_ms=50.0))
    assert tight.max_queued_requests.value == 1 and tight.replica_deadline_s.value == 0.02
    assert any("leaves no time to wait in Ray's router" in w for w in tight.warnings)
    # 92 ms + one 30 ms batch = 0.122 s is within Ray's default 20 s, which is kept
    assert plan.graceful_shutdown_timeout_s.value == 20.0
    assert "= 0.122 s" in plan.graceful_shutdown_timeout_s.reasoning
    long = derive_plan(facts(timeout_ms=60_000.0))
    assert long.graceful_shutdown_timeout_s.value == 60.03
    # a long deadline: the router gets half of it, the replica keeps the other half
    assert long.max_queued_requests.value == 8000  # no SLO: b* = 8, floor(8 / 30 ms x 30 s)
    assert long.replica_deadline_s.value == 30.0
    assert plan.ray_deployment() == {"max_ongoing_requests": 17, "max_queued_requests": 1,
                                     "backpressure_retry_after_s": 0.004,
                                     "graceful_shutdown_timeout_s": 20.0}


def test_warm_pool_is_cut_to_max_replicas() -> None:
    f = facts(goodput_rps=100.0, goodput_source="benchmark")
    plan = derive_plan(f, Demand(mean_rps=100.0, peak_rps=500.0, pattern="spiky"),
                       Limits(cluster_cpus=3.0))
    assert (plan.min_replicas.value, plan.max_replicas.value) == (3, 3)
    assert "cut to max_replicas 3" in plan.min_replicas.reasoning


def test_plan_round_trips_and_is_a_valid_ray_autoscaling_config() -> None:
    plan = derive_plan(facts(), Demand(slo_ms=50.0, mean_rps=50.0, peak_rps=600.0,
                                       pattern="bursty"), Limits(cluster_cpus=16.0),
                       push_interval_s=0.5)
    assert AutoscalePlan.from_dict(plan.to_dict()) == plan
    config = AutoscalingConfig(**plan.ray_autoscaling())
    options = plan.ray_deployment()
    deployment = DeploymentConfig(  # Ray's own validation of the deployment options
        max_ongoing_requests=options["max_ongoing_requests"],
        max_queued_requests=options["max_queued_requests"],
        backpressure_config=BackpressureConfig(
            retry_after_s=options["backpressure_retry_after_s"]),
        graceful_shutdown_timeout_s=options["graceful_shutdown_timeout_s"])
    assert deployment.max_queued_requests == plan.max_queued_requests.value >= 1
    assert config.min_replicas == plan.min_replicas.value == math.ceil(600 / 250)
    assert config.target_ongoing_requests == 8.5
    lines = plan.lines()
    assert len(lines) == len(plan.derivations()) + len(plan.warnings)
    assert all(":" in line and "\n" not in line for line in lines)


def test_bad_facts_are_refused() -> None:
    with pytest.raises(ValueError, match="service_ms"):
        facts(service_ms={})
    with pytest.raises(ValueError, match="service_ms"):
        facts(service_ms={0: 1.0})
    with pytest.raises(ValueError, match="cold_start_s"):
        facts(cold_start_s=-1.0)
    with pytest.raises(ValueError, match="timeout_ms"):
        facts(timeout_ms=0.0)
    with pytest.raises(ValueError, match="proxies"):
        Limits(proxies=0)
