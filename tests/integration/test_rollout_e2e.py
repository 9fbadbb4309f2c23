"""The rollout end to end over real HTTP (uvicorn on 127.0.0.1) with real onnxruntime models
from the registry: release A stable; B, a poor-quality build (weights disturbed), is rolled
back automatically at the first step while open-loop traffic flows with zero failed requests;
C, a faithful build, is promoted to 100%; `infertune rollback` then restores A under open-loop
load at half the measured capacity without losing a request."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import numpy as np
import pytest
from onnx_graphs import WIDTH
from prometheus_client.parser import text_string_to_metric_families
from rollout_load import OpenLoop, serving
from rollout_variants import mlp_run

from infertune.cli import main
from infertune.rollout.client import RouterClient, server_client
from infertune.rollout.controller import CanaryController, StepPlan
from infertune.rollout.gates import GateConfig
from infertune.rollout.observe import ServerMetrics
from infertune.rollout.release_registry import Registry
from infertune.rollout.release_router import build_router
from infertune.serve.routing import RoutingState

ENV = {"ROLLOUT_KEY": "k3y"}
_RNG = np.random.default_rng(0)
BODIES = [{"inputs": _RNG.standard_normal((2, WIDTH)).round(3).tolist()} for _ in range(300)]
# the test judges quality; on a shared 2-core machine latency tails move with the neighbours,
# so the latency tolerances are wider than the defaults (the statistics are unchanged)
GATES = GateConfig(alpha=0.05, min_samples=30, p95_tolerance=0.15, p99_tolerance=0.1)
PLAN = StepPlan(steps=(10.0, 50.0, 100.0), min_step_samples=30, baseline_samples=60,
                poll_s=0.2, step_timeout_s=90, baseline_timeout_s=30)
RATE_RPS = 50  # well under what one shared core answers, so no request waits for minutes


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    root = tmp_path_factory.mktemp("rollout")
    reg = Registry(root / "registry")
    reg.add(mlp_run(root / "run-a"), "A")
    reg.add(mlp_run(root / "run-b", noise=1.0), "B")  # fails a mean_cosine >= 0.99 floor
    reg.add(mlp_run(root / "run-c", noise=0.002), "C")  # a faithful rebuild
    return reg


def _router(registry: Registry, state: RoutingState, also: tuple[str, ...] = ()):
    return build_router(registry, state,
                        # a deadline far above any latency here: a shed request would be a
                        # failed one, and this test counts failures
                        lambda p: p.model_copy(update={"api_key_env": "ROLLOUT_KEY",
                                                       "timeout_ms": 30_000.0}), ENV,
                        also=also)


@pytest.mark.slow
def test_bad_canary_rolled_back_good_one_promoted_no_failed_requests(registry, tmp_path,
                                                                     monkeypatch) -> None:
    router = _router(registry, RoutingState(stable="A", canary="B"), also=("C",))
    monkeypatch.setenv("ROLLOUT_KEY", ENV["ROLLOUT_KEY"])
    with serving(router) as url, server_client(url, "ROLLOUT_KEY", ENV) as client, \
            OpenLoop(url, RATE_RPS, BODIES, {"X-API-Key": "k3y"}) as load:
        control = RouterClient(client)
        # B through the command line: exit 1 with the reason, the outcome in --json
        rc = main(["canary", "--server", url, "--release", "B", "--steps", "10,50,100",
                   "--api-key-env", "ROLLOUT_KEY", "--min-step-samples", "30",
                   "--baseline-samples", "60", "--poll-s", "0.2", "--step-timeout-s", "90",
                   "--json", str(tmp_path / "b.json")])
        rolled_back_at = time.perf_counter() - load.started + 0.05
        bad = json.loads((tmp_path / "b.json").read_text())
        assert rc == 1 and bad["decision"] == "rolled_back", bad["reason"]
        assert [s["weight"] for s in bad["steps"]] == [10.0]  # caught at the first step
        assert "agreement" in bad["reason"] and "interval" in bad["reason"]
        failed = [g for g in bad["steps"][0]["gates"] if g["verdict"] == "fail"]
        assert failed[0]["gate"] == "agreement" and failed[0]["interval"][0] > 0.05
        assert bad["rollback_seconds"] < 1.0
        assert control.state().canary is None
        assert registry.get("B").status == "rolled_back"
        assert "agreement" in (registry.get("B").status_reason or "")

        control.change("canary", release="C", reason="next candidate")
        good = CanaryController(control, ServerMetrics(client), GATES, PLAN).run("C")
        assert good.decision == "promoted", good.reason
        assert [s.weight for s in good.steps] == [10.0, 50.0, 100.0]
        assert control.state() == RoutingState(stable="C", previous_stable="A")
        metrics = client.get("/metrics").text
    answers = load.answers
    assert len(answers) == load.sent > 200
    assert [a for a in answers if a.status != 200] == []  # zero failed client requests
    assert {"A", "B", "C"} <= {a.release for a in answers}
    # once the rollback call returned, B answered nothing sent later
    assert "B" not in {a.release for a in answers if a.intended > rolled_back_at}
    assert registry.get("C").status == "stable" and registry.get("A").status == "retired"
    kinds = [e.kind for e in registry.events() if e.kind.startswith("routing:")]
    assert kinds[0] == "routing:start" and "routing:rollback" in kinds
    assert kinds[-1] == "routing:promote"
    samples = [s for f in text_string_to_metric_families(metrics) for s in f.samples]
    roles = {s.labels["release"]: s.labels["role"] for s in samples
             if s.name == "infertune_release_info"}
    assert roles == {"A": "loaded", "B": "loaded", "C": "stable"}
    answered_by_b = [s.value for s in samples if s.name == "infertune_requests_total"
                     and s.labels == {"release": "B", "status": "200"}]
    assert answered_by_b and answered_by_b[0] > 0


def _capacity(url: str, seconds: float = 1.5, concurrency: int = 8) -> float:
    """Closed-loop answers per second through the router (client included)."""
    async def worker(client: httpx.AsyncClient, stop: float, done: list[int]) -> None:
        while time.perf_counter() < stop:
            r = await client.post("/v1/predict", json=BODIES[len(done) % len(BODIES)],
                                  headers={"X-API-Key": "k3y"})
            assert r.status_code == 200
            done.append(1)

    async def run() -> float:
        done: list[int] = []
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            stop = time.perf_counter() + seconds
            await asyncio.gather(*(worker(client, stop, done) for _ in range(concurrency)))
        return len(done) / seconds

    return asyncio.run(run())


@pytest.mark.slow
def test_rollback_under_open_loop_load_at_half_capacity_loses_nothing(registry, monkeypatch,
                                                                      capsys) -> None:
    router = _router(registry, RoutingState(stable="A", canary="C", canary_weight=50))
    with serving(router) as url:
        capacity = _capacity(url)
        with OpenLoop(url, capacity / 2, BODIES, {"X-API-Key": "k3y"}) as load:
            time.sleep(1.0)
            monkeypatch.setenv("ROLLOUT_KEY", "k3y")
            began = time.perf_counter()
            rc = main(["rollback", "--server", url, "--api-key-env", "ROLLOUT_KEY",
                       "--reason", "test"])
            after = time.perf_counter() - began
            assert rc == 0
            time.sleep(1.0)
        assert "rolled back: all traffic to A" in capsys.readouterr().out
    answers = load.answers
    assert len(answers) == load.sent > 0.5 * capacity  # every request sent got an answer
    assert [a for a in answers if a.status != 200] == []
    assert {a.release for a in answers} == {"A", "C"}
    # answers sent a moment after the command returned all come from A
    assert load.releases_after(answers[-1].intended - 0.5) == {"A"}
    assert after < 5
