"""Safe rollout: the release registry (SQLite + content-addressed variant folders), building
the multi-release router from it, the canary controller with always-valid gates, A/B analysis
of business feedback, and rollback.

    release_registry.py  immutable releases, statuses, the append-only event log
    release_router.py    registry releases -> serve.routing.Router
    stats.py             confidence sequences valid under continuous monitoring
    gates.py             errors, latency p95/p99, output agreement, business metric
    canary_plan.py       the canary's steps and sample sizes, from the measured traffic
    observe.py           counts per release from /metrics or Prometheus
    controller.py        steps, judge, promote or roll back; client.py speaks to the server
    ab.py                business metric per arm, sample size, decision
    canary_sim.py        a simulated server to measure the controller's error rates
"""
