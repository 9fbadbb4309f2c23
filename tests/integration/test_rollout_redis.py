"""Two replicas sharing a real Redis (the serve policy's redis_url): feedback for an answer
one replica gave, posted to the other, is recorded against the right release; `ab report
--redis` reads it; with Redis gone, predictions still answer and feedback says 503."""

from __future__ import annotations

import contextlib
import json

import httpx
import numpy as np
import pytest
from onnx_graphs import WIDTH
from rollout_load import redis_server, serving
from rollout_variants import mlp_run

from infertune.cli import main
from infertune.rollout.feedback import RedisFeedback
from infertune.rollout.release_registry import Registry
from infertune.rollout.release_router import build_router
from infertune.rollout.stats import Counts
from infertune.serve.routing import RoutingState


@pytest.mark.slow
def test_feedback_is_shared_between_replicas_through_redis(tmp_path, capsys) -> None:
    reg = Registry(tmp_path / "registry")
    reg.add(mlp_run(tmp_path / "a"), "A")
    reg.add(mlp_run(tmp_path / "b", noise=0.5), "B")
    rng = np.random.default_rng(1)
    with redis_server(tmp_path) as (url, proc), contextlib.ExitStack() as stack:
        urls = []
        for _ in range(2):
            router = build_router(reg, RoutingState(stable="A", canary="B", canary_weight=50),
                                  lambda p: p.model_copy(update={"redis_url": url,
                                                                 "timeout_ms": 30_000.0}),
                                  {})
            urls.append(stack.enter_context(serving(router)))
        one, two = (stack.enter_context(httpx.Client(base_url=u, timeout=30)) for u in urls)
        expected: dict[str, list[int]] = {"A": [0, 0], "B": [0, 0]}
        for i in range(40):
            body = {"inputs": rng.standard_normal((1, WIDTH)).round(3).tolist()}
            answer = one.post("/v1/predict", json=body, headers={"X-Unit-Id": f"u{i}"})
            assert answer.status_code == 200
            release, value = answer.headers["x-release"], i % 3 == 0
            fed = two.post("/v1/feedback", json={"request_id": answer.headers["x-request-id"],
                                                 "metric": "conversion", "value": int(value)})
            assert fed.status_code == 200 and fed.json()["release"] == release
            expected[release][0] += 1
            expected[release][1] += int(value)
        assert expected["A"][0] and expected["B"][0]
        store = RedisFeedback(url)
        assert store.counts("conversion") == {r: Counts(n, k) for r, (n, k) in expected.items()}
        assert store.metrics() == ["conversion"]
        assert main(["ab", "report", "--redis", url, "--control", "A", "--treatment", "B",
                     "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert (report["control"]["n"], report["treatment"]["n"]) == (expected["A"][0],
                                                                      expected["B"][0])
        proc.terminate()
        proc.wait(timeout=10)
        still = one.post("/v1/predict", json={"inputs": [[0.5] * WIDTH]})
        assert still.status_code == 200
        lost = two.post("/v1/feedback", json={"request_id": still.headers["x-request-id"],
                                              "metric": "conversion", "value": 1})
        assert lost.status_code == 503 and "unreachable" in lost.json()["error"]
