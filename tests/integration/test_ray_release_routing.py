"""Release routing on `infertune serve --engine ray`: two replicas serve registry releases A
(stable) and B (canary at 30%) from tiny real ONNX models. Every unit lands on the arm its
X-Unit-Id hashes to whichever replica answers; a weight change and a rollback made through one
replica are served by every replica once the admin call answers (each replica's routing
version on /metrics), and the registry's event log records them. Then `infertune canary`, judging
the merged /metrics of both replicas, rolls B back at its first step under open-loop traffic
with no failed request. Ray is stopped (SIGTERM, then by pid) even when an assertion fails."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest
from onnx_graphs import WIDTH
from prometheus_client.parser import text_string_to_metric_families
from rollout_load import OpenLoop, free_port
from rollout_variants import mlp_run

from infertune.cli import main
from infertune.rollout.observe import parse_exposition
from infertune.rollout.release_registry import Registry
from infertune.serve.routing import unit_bucket

pytestmark = pytest.mark.slow

KEY = {"X-API-Key": "r4y-k3y"}
START_TIMEOUT_S = 300.0
UNITS = [f"user-{i}" for i in range(120)]
RATE_RPS = 20  # open-loop traffic during the canary, well under two replicas' capacity here
_RNG = np.random.default_rng(0)
BODIES = [{"inputs": _RNG.standard_normal((2, WIDTH)).round(3).tolist()} for _ in range(100)]
BODY = {"inputs": [[0.1] * WIDTH]}


def _get(url: str) -> int:
    try:
        return httpx.get(url, headers=KEY, timeout=5).status_code
    except httpx.HTTPError:
        return 0


def replica_view(url: str) -> dict[str, tuple[float, float]]:
    """replica -> (routing version, canary weight) as every replica reports it on /metrics."""
    text = httpx.get(url + "/metrics", headers=KEY, timeout=30).text
    out: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "infertune_replica_routing_version":
                out.setdefault(s.labels["replica"], [0.0, 0.0])[0] = s.value
            elif s.name == "infertune_replica_canary_weight_percent":
                out.setdefault(s.labels["replica"], [0.0, 0.0])[1] = s.value
    return {k: (v[0], v[1]) for k, v in out.items()}


@contextlib.contextmanager
def ray_router(registry: Path, workdir: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    log = workdir / "serve.log"
    cli = Path(sys.executable).parent / "infertune"
    children: set[int] = set()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(cli), "serve", "--engine", "ray", "--registry", str(registry), "--stable", "A",
             "--canary", "B", "--canary-weight", "30", "--min-replicas", "2", "--port",
             str(port), "--api-key-env", "RAY_ROUTING_KEY", "--timeout-ms", "60000"],
            cwd=workdir, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "RAY_ROUTING_KEY": KEY["X-API-Key"]})
    url = f"http://127.0.0.1:{port}"

    def tail() -> str:
        return log.read_text(errors="replace")[-3000:]

    def remember() -> None:
        with contextlib.suppress(psutil.NoSuchProcess):
            children.update(c.pid for c in psutil.Process(proc.pid).children(True))

    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while _get(url + "/readyz") != 200 or len(replica_view(url)) < 2:
            remember()
            assert proc.poll() is None, f"serve --engine ray exited:\n{tail()}"
            assert time.monotonic() < deadline, f"not 2 ready replicas in time:\n{tail()}"
            time.sleep(1.0)
        remember()
        yield url, proc
    finally:
        remember()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        for pid in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    psutil.Process(pid).kill()


def routed_by_replica(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", headers=KEY, timeout=30).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "infertune_routed_requests_total":
                out[s.labels["replica"]] = out.get(s.labels["replica"], 0.0) + s.value
    return out


def arms(client: httpx.Client, url: str) -> dict[str, str]:
    """unit -> the release that answered it (every answer a 200)."""
    out = {}
    for unit in UNITS:
        r = client.post(url + "/v1/predict", json=BODY, headers={**KEY, "X-Unit-Id": unit})
        assert r.status_code == 200, r.text
        out[unit] = r.headers["x-release"]
    return out


def expected(weight: float) -> dict[str, str]:
    return {u: "B" if unit_bucket(u) < weight else "A" for u in UNITS}


def test_routing_is_shared_by_every_ray_replica(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "registry"
    reg = Registry(root)
    reg.add(mlp_run(tmp_path / "run-a"), "A")
    reg.add(mlp_run(tmp_path / "run-b", noise=1.0), "B")
    reg.close()
    with ray_router(root, tmp_path) as (url, _), httpx.Client(timeout=60) as client:
        view = replica_view(url)
        assert len(view) >= 2 and all(v == (1.0, 30.0) for v in view.values()), view
        # sticky per unit, on whichever replica: the split is exactly the hash's
        got = arms(client, url)
        assert got == expected(30.0)
        assert 0 < sum(a == "B" for a in got.values()) < len(UNITS)

        r = client.post(url + "/admin/routing", headers=KEY,
                        json={"action": "weight", "weight": 60, "reason": "step 2"})
        assert r.status_code == 200 and r.json()["canary_weight"] == 60.0, r.text
        # the admin call answered: every replica already routes with the new state
        view = replica_view(url)
        assert len(view) >= 2 and all(v == (2.0, 60.0) for v in view.values()), view
        assert arms(client, url) == expected(60.0)

        # a gate's decision, through the command the controller's rollback shares; no replica
        # sends another request to B once it answers
        monkeypatch.setenv("RAY_ROUTING_KEY", KEY["X-API-Key"])
        assert main(["rollback", "--server", url, "--api-key-env", "RAY_ROUTING_KEY",
                     "--reason", "gate: agreement failed"]) == 0
        assert "rolled back: all traffic to A" in capsys.readouterr().out
        view = replica_view(url)
        assert len(view) >= 2 and all(v == (3.0, 0.0) for v in view.values()), view
        assert set(arms(client, url).values()) == {"A"}
        # the same refusals as the local engine: nothing left to weigh, a key is needed
        r = client.post(url + "/admin/routing", headers=KEY, json={"action": "weight",
                                                                    "weight": 5})
        assert r.status_code == 409 and "no canary to weigh" in r.json()["error"], r.text
        assert client.post(url + "/admin/routing", json={"action": "rollback"}).status_code == 401
        state = client.get(url + "/admin/routing", headers=KEY).json()
        assert state["stable"] == "A" and state["canary"] is None
        # /metrics carries every replica's router series (a canary judged on it sees all the
        # traffic): the routed counts add up to the 3 x 120 predictions sent, over 2 replicas
        routed = routed_by_replica(url)
        assert len(routed) >= 2 and sum(routed.values()) == 3 * len(UNITS), routed
        snap = parse_exposition(httpx.get(url + "/metrics", headers=KEY, timeout=30).text)
        assert snap.of("B").requests >= sum(a == "B" for a in expected(60.0).values())
        # the controller's own gates on the merged /metrics: B (disturbed weights) back as a
        # canary is rolled back at the first step on output agreement, under open-loop
        # traffic through both replicas, with no failed request
        r = client.post(url + "/admin/routing", headers=KEY,
                        json={"action": "canary", "release": "B", "weight": 0})
        assert r.status_code == 200, r.text
        with OpenLoop(url, RATE_RPS, BODIES, KEY) as load:
            rc = main(["canary", "--server", url, "--release", "B", "--steps", "10,50,100",
                       "--api-key-env", "RAY_ROUTING_KEY", "--min-step-samples", "20",
                       "--baseline-samples", "40", "--poll-s", "0.5", "--step-timeout-s",
                       "120", "--json", str(tmp_path / "b.json")])
            # the rollback can land within a second (17 requests sent in one CI run): keep
            # the traffic flowing past it, so "no failed request" covers the time after it too
            load.wait_sent(int(load.sent + 2 * RATE_RPS))
        outcome = json.loads((tmp_path / "b.json").read_text())
        assert rc == 1 and outcome["decision"] == "rolled_back", outcome["reason"]
        assert [s["weight"] for s in outcome["steps"]] == [10.0]
        assert "agreement" in outcome["reason"]
        assert outcome["rollback_seconds"] < 1.0  # the admin call reached every replica
        assert load.sent >= 2 * RATE_RPS and len(load.answers) == load.sent
        assert [a for a in load.answers if a.status != 200] == []
        view = replica_view(url)
        assert len(view) >= 2 and len({v for v in view.values()}) == 1, view
        assert next(iter(view.values()))[1] == 0.0  # every replica: the canary at 0%
    after = Registry(root)
    kinds = [e.kind for e in after.events() if e.kind.startswith("routing:")]
    # one start (the driver's, not one per replica), then each change once
    assert kinds[:3] == ["routing:start", "routing:weight", "routing:rollback"], kinds
    assert kinds.count("routing:start") == 1 and kinds[-1] == "routing:rollback", kinds
    assert after.get("B").status == "rolled_back" and after.get("A").status == "stable"
    assert "agreement" in (after.get("B").status_reason or "")
