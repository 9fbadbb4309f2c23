"""`infertune canary` with its default options over real HTTP (uvicorn on 127.0.0.1, real
onnxruntime models from the registry; `infertune serve --registry` in its own process) under
open-loop traffic at 20 req/s: the plan is sized
from the measured rate, a release whose outputs disagree is rolled back, and a faithful one
is promoted, each within 5 minutes, with no failed client request."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from onnx_graphs import WIDTH
from release_server import release_server
from rollout_load import OpenLoop
from rollout_variants import mlp_run

from infertune.cli import main
from infertune.rollout.client import RouterClient, server_client
from infertune.rollout.release_registry import Registry
from infertune.serve.routing import RoutingState

ENV = {"CANARY_KEY": "k3y"}
_RNG = np.random.default_rng(1)
# every body distinct (12,000 are sent in two rollouts of at most 300 s): the response cache
# would answer repeats from memory, far more often for the stable, which has seen them all,
# than for the canary (with 400 repeating bodies the faithful canary was rolled back on
# latency_p95: 75 of its answers, 16 points more of them slower than 9 ms than the stable's)
BODIES = [{"inputs": _RNG.standard_normal((1, WIDTH)).round(3).tolist()} for _ in range(14_000)]
RATE_RPS = 20.0


def _canary(url: str, release: str, out) -> tuple[int, dict, float]:
    began = time.perf_counter()
    rc = main(["canary", "--server", url, "--api-key-env", "CANARY_KEY", "--release", release,
               "--json", str(out)])
    return rc, json.loads(out.read_text()), time.perf_counter() - began


@pytest.mark.slow
def test_default_canary_at_20_rps_rolls_back_a_bad_release_and_promotes_a_good_one(
        tmp_path, monkeypatch) -> None:
    reg = Registry(tmp_path / "registry")
    reg.add(mlp_run(tmp_path / "run-a"), "A")
    reg.add(mlp_run(tmp_path / "run-b", noise=1.0), "B")  # its outputs disagree
    reg.add(mlp_run(tmp_path / "run-c", noise=0.002), "C")  # a faithful rebuild
    monkeypatch.setenv("CANARY_KEY", ENV["CANARY_KEY"])
    answers = []
    for canary in ("B", "C"):
        with release_server(reg.root, "A", canary=canary, api_key_env="CANARY_KEY",
                            env=ENV) as url, \
                OpenLoop(url, RATE_RPS, BODIES, {"X-API-Key": "k3y"}) as load:
            rc, outcome, seconds = _canary(url, canary, tmp_path / f"{canary}.json")
            with server_client(url, "CANARY_KEY", ENV) as client:
                state = RouterClient(client).state()
        answers += load.answers
        assert seconds < 300, outcome["reason"]  # decided within 5 minutes
        plan = outcome["plan"]
        # the plan came from the rate it measured: about 20 req/s, first step under 25%
        assert 15 < plan["traffic"]["rate_rps"] < 25 and plan["steps"][0] < 25
        assert not plan["explicit"] and plan["expected_s"] <= 0.9 * 300
        if canary == "B":
            assert rc == 1 and outcome["decision"] == "rolled_back", outcome["reason"]
            assert outcome["steps"][-1]["weight"] == plan["steps"][0]
            failed = [g["gate"] for g in outcome["steps"][-1]["gates"]
                      if g["verdict"] == "fail"]
            assert "agreement" in failed and state.canary is None
        else:
            assert rc == 0 and outcome["decision"] == "promoted", outcome["reason"]
            assert [s["weight"] for s in outcome["steps"]] == plan["steps"]
            assert all(s["canary_answers"] >= plan["step_samples"] for s in outcome["steps"])
            assert state == RoutingState(stable="C", previous_stable="A")
    assert [a for a in answers if a.status != 200] == []
