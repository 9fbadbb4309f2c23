"""`infertune serve --engine ray` under traffic above what one replica carries (issue 29):

- a step to 3x one replica's capacity: Ray's router refuses the excess at once (503 with
  Retry-After, bounded by the plan's max_queued_requests), no request goes unanswered, each
  replica answers within its deadline (the plan's, less the router's wait) plus one batch
  time, and the deployment grows to the 2 replicas the plan allows;
- SIGTERM with requests in flight: every one of them gets an HTTP answer (200, or 503 from a
  replica that is shutting down), none a cut connection, and Ray's processes exit;
- --ray-address: the same command joins a `ray start --head` this test starts (and stops, by
  its own process group), and leaves that cluster running without the app.

The model is serve_fault_models' fixed-time doubler: its forward sleeps SERVICE_MS per batch
whatever the batch size, so one replica's capacity is max_batch_size / SERVICE_MS by
construction (a sleep does not depend on how busy the shared cores are). The replica's bound
is read from its Server-Timing; the end-to-end time through Ray's proxy is printed, not
asserted: on a busy 2-core machine the proxy's share is not something the plan bounds
(benchmarks/ray_scaling.py prints it for the lead's figures).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
import pytest

from infertune.loadgen.result import RequestRecord, parse_server_timing
from infertune.loadgen.runner import RunOptions, run_schedule
from infertune.loadgen.schedules import ScheduleSpec, build_schedule
from infertune.loadgen.targets import Reply

pytestmark = pytest.mark.slow

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
SERVICE_MS = 100.0
MAX_BATCH = 4
TIMEOUT_MS = 600.0
CAPACITY_RPS = 1000.0 * MAX_BATCH / SERVICE_MS  # one replica, one input per request: 40
FLAGS = ["--max-batch-size", str(MAX_BATCH), "--max-wait-ms", "2", "--timeout-ms",
         str(TIMEOUT_MS), "--max-queue", "64"]
START_TIMEOUT_S = 300.0
RAY_REFUSAL = b"Request dropped due to backpressure"


def _env() -> dict[str, str]:
    # RAY_AUTH_MODE=token: the joined head (and `ray status`) use token authentication, which
    # Ray enables for an explicit address only when told to
    return {**os.environ, "SERVE_FAULT_SERVICE_MS": str(SERVICE_MS), "RAY_AUTH_MODE": "token",
            "PYTHONPATH": os.pathsep.join([str(HELPERS), os.environ.get("PYTHONPATH", "")])}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    url: str
    workdir: Path
    children: set[int] = field(default_factory=set)

    def plan(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.workdir / "ray_autoscaling.json").read_text())
        return data

    def log_tail(self) -> str:
        return (self.workdir / "serve.log").read_text(errors="replace")[-3000:]

    def remember_children(self) -> None:
        with contextlib.suppress(psutil.NoSuchProcess):
            self.children |= {c.pid for c in psutil.Process(self.proc.pid).children(True)}

    def stop(self) -> list[int]:
        """SIGTERM; SIGKILL by process group only if it hangs. Returns the pids of the
        command's children that outlived it (and were then killed)."""
        self.remember_children()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        left = []
        for pid in self.children:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc = psutil.Process(pid)
                if proc.status() != psutil.STATUS_ZOMBIE:
                    left.append(pid)
                    proc.kill()
        return left


def start_serve(workdir: Path, extra: tuple[str, ...] = ()) -> Served:
    workdir.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    cli = Path(sys.executable).parent / "infertune"
    with (workdir / "serve.log").open("wb") as out:
        proc = subprocess.Popen(
            [str(cli), "serve", "serve_fault_models:factory", "--engine", "ray", "--port",
             str(port), *FLAGS, *extra], cwd=workdir, env=_env(), stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True)
    served = Served(proc, f"http://127.0.0.1:{port}", workdir)
    give_up = time.monotonic() + START_TIMEOUT_S
    while not ((workdir / "ray_autoscaling.json").is_file() and _answers(served.url + "/readyz")):
        served.remember_children()
        if proc.poll() is not None or time.monotonic() > give_up:
            served.stop()
            pytest.fail(f"serve --engine ray did not come up:\n{served.log_tail()}")
        time.sleep(0.5)
    served.remember_children()
    return served


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One embedded-Ray server for the step and the drain (the drain stops it)."""
    server = start_serve(tmp_path_factory.mktemp("ray-shed"))
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Answer:
    status: str
    by_ray: bool = False
    retry_after: bool = False
    replica_s: float | None = None  # the replica runtime's own time (its Server-Timing)


class Sender:
    """POSTs one new random row per request and keeps who answered and Retry-After."""

    name = "ray-shed"

    def __init__(self, url: str, n: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        # values in [10, 20): never the doubler's poison (-1) or stall (9) markers
        self.bodies = [json.dumps({"inputs": [(10 + 10 * rng.random(4)).tolist()]}).encode()
                       for _ in range(n)]
        self.url = url + "/v1/predict"
        self.answers: dict[int, Answer] = {}
        self._session: Any = None

    async def open(self) -> None:
        import aiohttp

        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=30))

    async def send(self, index: int) -> Reply:
        import aiohttp

        try:
            async with self._session.post(self.url, data=self.bodies[index % len(self.bodies)],
                                          headers={"Content-Type": "application/json"}) as resp:
                body = await resp.read()
                timing = parse_server_timing(resp.headers.get("Server-Timing"))
                self.answers[index] = Answer(
                    str(resp.status), RAY_REFUSAL in body[:200], "Retry-After" in resp.headers,
                    sum(timing.values()) / 1000 if timing else None)
                return Reply(str(resp.status))
        except TimeoutError:
            return Reply("timeout")
        except aiohttp.ClientConnectionError:
            return Reply("connection_error")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def poisson(url: str, rate: float, seconds: float, seed: int) -> tuple[list[RequestRecord],
                                                                        Sender]:
    sender = Sender(url, int(rate * seconds * 1.5) + 16, seed)
    schedule = build_schedule(ScheduleSpec(shape="poisson", rate=rate, duration_s=seconds,
                                           seed=seed))
    return asyncio.run(run_schedule(schedule, sender, RunOptions(seed=seed))), sender


class ReplicaCount:
    """The RUNNING replicas Ray Serve reports, from a driver joined to the server's cluster."""

    def __init__(self, address: str) -> None:
        import ray
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )

        # Ray sends this user's token to an explicit address only when told to (it does so
        # itself for address="auto", which would pick whichever cluster started last); this
        # is the cluster the command under test started
        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
        ray.init(address=address, log_to_driver=False, logging_level="error")
        self.seen: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        from ray import serve

        t0 = time.monotonic()
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # a status call during a redeploy may fail
                app = serve.status().applications.get("infertune")
                states = app.deployments["infertune"].replica_states if app else {}
                self.seen.append((time.monotonic() - t0, int(sum(
                    n for s, n in states.items() if str(s).endswith("RUNNING")))))
            self._stop.wait(0.5)

    def close(self) -> None:
        import ray

        self._stop.set()
        self._thread.join(timeout=30)
        ray.shutdown()


def test_plan_bounds_the_router_queue_and_caps_replicas_by_the_cluster(served: Served) -> None:
    document = served.plan()
    plan = document["plan"]
    assert document["measured"]["cluster_cpus"] >= 2, "these tests need 2 cores for Ray"
    # the sleep makes every batch size cost SERVICE_MS: capacity 4 / 0.1 s = 40 req/s
    assert plan["replica_capacity_rps"]["value"] == pytest.approx(CAPACITY_RPS, rel=0.1)
    capacity = plan["replica_capacity_rps"]["value"]
    ongoing = plan["max_ongoing_requests"]["value"]
    assert plan["deadline_s"]["value"] == TIMEOUT_MS / 1000
    # a full replica: max_wait + (ceil(max_ongoing / 4) + 1) batches of 4 at X
    hold = 0.002 + (math.ceil(ongoing / MAX_BATCH) + 1) * MAX_BATCH / capacity
    queued = max(1, math.floor(capacity * (TIMEOUT_MS / 1000 - hold) + 1e-9))
    assert plan["max_queued_requests"]["value"] == queued
    # each replica serves with the deadline less the router's wait, which it cannot see
    replica_s = plan["replica_deadline_s"]["value"]
    assert replica_s == round(TIMEOUT_MS / 1000 - queued / capacity, 4)
    served_config = httpx.get(served.url + "/v1/config", timeout=30).json()
    assert served_config["policy"]["timeout_ms"] == pytest.approx(replica_s * 1000), served_config
    assert plan["min_replicas"]["value"] == 1  # no forecast: a warm pool of one
    cluster = int(document["measured"]["cluster_cpus"])  # 1 CPU per replica
    assert plan["max_replicas"]["value"] == cluster
    options = plan["ray_autoscaling_config"], document["plan"]["ray_deployment_options"]
    assert options[1]["max_queued_requests"] == plan["max_queued_requests"]["value"]


def test_a_step_to_three_times_capacity_sheds_at_once_and_scales_to_two(
        served: Served) -> None:
    plan = served.plan()["plan"]
    limit_s = plan["deadline_s"]["value"] + SERVICE_MS / 1000  # the deadline + one batch
    poisson(served.url, 0.25 * CAPACITY_RPS, 3.0, seed=1)  # untimed: first connections
    watch = ReplicaCount(served.plan()["cluster_address"])
    try:
        records, sender = [], None
        for seed in range(2, 8):  # 3x capacity until a second replica runs, then 4 s more
            got, sender = poisson(served.url, 3 * CAPACITY_RPS, 6.0, seed=seed)
            records += [(seed, r, sender.answers.get(r.index)) for r in got]
            if max((n for _, n in watch.seen), default=0) >= 2:
                got, sender = poisson(served.url, 3 * CAPACITY_RPS, 4.0, seed=100)
                records += [(100, r, sender.answers.get(r.index)) for r in got]
                break
        seen = list(watch.seen)
    finally:
        watch.close()
    served.remember_children()
    statuses = {r.status for _, r, _ in records}
    assert statuses <= {"200", "503", "429"}, (statuses, served.log_tail())
    assert max(n for _, n in seen) == 2, (seen, served.log_tail())
    refused = [(r, a) for _, r, a in records if r.status in ("503", "429")]
    answered = [r for _, r, _ in records if r.status == "200"]
    assert refused and answered
    by_ray = [r for r, a in refused if a is not None and a.by_ray]
    assert by_ray, "Ray's router never refused: its queue is not bounded"
    assert all(a is not None and a.retry_after for r, a in refused if a and a.by_ray)
    # infertune's admission in each replica: every answer within the replica's deadline (the
    # deadline less the router's wait) plus one batch time, on the replica's own clock
    replica_limit_s = plan["replica_deadline_s"]["value"] + SERVICE_MS / 1000
    inside = [a.replica_s for _, r, a in records if r.status == "200" and a and a.replica_s]
    assert len(inside) == len(answered)
    assert max(inside) <= replica_limit_s, (replica_limit_s, sorted(inside)[-10:])
    # end to end (from each send) the proxy's own time comes on top; on a busy shared host it
    # is not bounded by anything the plan sets, so it is reported, not asserted
    late = sum(r.done_s - r.sent_s > limit_s for _, r, _ in records)
    print(f"end to end past the deadline + one batch ({limit_s:g} s): {late} of {len(records)}")


def test_sigterm_with_requests_in_flight_answers_every_one(served: Served) -> None:
    results: list[RequestRecord] = []
    sender_box: list[Sender] = []

    def load() -> None:
        got, sender = poisson(served.url, CAPACITY_RPS, 3.0, seed=200)
        results.extend(got)
        sender_box.append(sender)

    thread = threading.Thread(target=load)
    thread.start()
    time.sleep(1.5)  # half-way through the burst: requests queued and in the model
    served.remember_children()
    served.proc.send_signal(signal.SIGTERM)
    thread.join(timeout=120)
    code = served.proc.wait(timeout=120)
    left = served.stop()
    sent_before = [r for r in results if r.sent_s < 1.5]
    assert len(sent_before) > 20
    statuses = {r.status for r in sent_before}
    # each request sent before SIGTERM was answered: served (200) or refused by a replica
    # that is shutting down (503); none lost its connection mid-answer
    assert statuses <= {"200", "503"}, (statuses, served.log_tail())
    assert "200" in statuses
    assert code == 0, served.log_tail()
    assert left == [], "Ray processes outlived serve's SIGTERM"


@contextlib.contextmanager
def ray_head(cpus: int) -> Iterator[str]:
    """`ray start --head --block` in its own session and temp dir; stopped by its group."""
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="itray", dir="/tmp")
    ray_cli = Path(sys.executable).parent / "ray"
    proc = subprocess.Popen(
        [str(ray_cli), "start", "--head", "--block", f"--port={port}", f"--num-cpus={cpus}",
         "--include-dashboard=false", f"--temp-dir={temp}", "--disable-usage-stats"],
        env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        give_up = time.monotonic() + 120
        while subprocess.run([str(ray_cli), "status", f"--address={address}"], env=_env(),
                             capture_output=True).returncode != 0:
            assert proc.poll() is None, "ray start --head exited"
            assert time.monotonic() < give_up, "ray start --head not up in 120 s"
            time.sleep(1.0)
        yield address
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # --block stops the node's processes
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def test_ray_address_joins_a_started_head_and_leaves_it_running(tmp_path: Path) -> None:
    with ray_head(cpus=2) as address:
        server = start_serve(tmp_path / "joined", ("--ray-address", address))
        try:
            document = server.plan()
            assert document["ray_address"] == address
            # a joined cluster keeps Ray's default push interval, which the plan says
            assert "Ray's default" in document["plan"]["metrics_push_interval_s"]["reasoning"]
            answer = httpx.post(server.url + "/v1/predict",
                                json={"inputs": [[11.0, 12.0, 13.0, 14.0]]}, timeout=30)
            assert answer.status_code == 200, answer.text
            assert answer.json()["outputs"] == [[22.0, 24.0, 26.0, 28.0]]
        finally:
            left = server.stop()
        assert server.proc.returncode == 0, server.log_tail()
        assert left == []
        ray_cli = Path(sys.executable).parent / "ray"
        status = subprocess.run([str(ray_cli), "status", f"--address={address}"], env=_env(),
                                capture_output=True, text=True)
        assert status.returncode == 0, status.stderr  # the cluster outlives the command
        with contextlib.suppress(httpx.HTTPError):  # the app is gone from it
            assert httpx.get(server.url + "/readyz", timeout=5).status_code != 200
