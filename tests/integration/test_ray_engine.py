"""`infertune serve --engine ray` end to end on a real (tiny, random-weight) BERT classifier:
the same answers, errors and headers as the local engine, then an open-loop step load
(low -> high -> low) on 127.0.0.1 that takes the replica count from the warm pool to 2 because
queues grew, and back, with no failed request. Ray is stopped (SIGTERM, then by pid) even when
an assertion fails."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
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
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from infertune.config import ServePolicy
from infertune.loadgen.result import RequestRecord
from infertune.loadgen.runner import RunOptions, run_schedule
from infertune.loadgen.schedules import ScheduleSpec, build_schedule
from infertune.loadgen.targets import HttpTarget
from infertune.models import load
from infertune.serve import create_app

pytestmark = pytest.mark.slow

WORDS = "how do i reset my password the report shows revenue grew fast slow answer".split()
FLAGS = ["--max-batch-size", "4", "--max-wait-ms", "2", "--timeout-ms", "120000"]
POLICY = ServePolicy(max_batch_size=4, max_wait_ms=2, timeout_ms=120000)
INPUTS_PER_REQUEST = 4
START_TIMEOUT_S = 300.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _classifier(folder: Path) -> Path:
    import torch
    import transformers

    folder.mkdir(parents=True)
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    torch.manual_seed(0)
    # wide enough that a batch costs milliseconds, so the replica (not the proxy) saturates
    config = transformers.BertConfig(
        vocab_size=5 + len(WORDS), hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
        intermediate_size=1024, max_position_embeddings=64, num_labels=3)
    transformers.BertForSequenceClassification(config).eval().save_pretrained(folder)
    transformers.BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(folder)
    return folder


@dataclass
class RayServer:
    proc: subprocess.Popen[bytes]
    url: str
    workdir: Path
    log: Path
    children: set[int] = field(default_factory=set)
    left_behind: list[int] = field(default_factory=list)  # had to be killed after SIGTERM

    def plan(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.workdir / "ray_autoscaling.json").read_text())
        return data

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def remember_children(self) -> None:
        with contextlib.suppress(psutil.NoSuchProcess):
            self.children |= {c.pid for c in psutil.Process(self.proc.pid).children(True)}


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def ray_server(model: Path, workdir: Path) -> Iterator[RayServer]:
    port = _free_port()
    log = workdir / "serve.log"
    cli = Path(sys.executable).parent / "infertune"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(cli), "serve", str(model), "--engine", "ray", "--port", str(port), *FLAGS],
            cwd=workdir, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server = RayServer(proc, f"http://127.0.0.1:{port}", workdir, log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (_answers(server.url + "/readyz")
                   and (workdir / "ray_autoscaling.json").is_file()):
            server.remember_children()
            assert proc.poll() is None, f"serve --engine ray exited:\n{server.log_tail()}"
            assert time.monotonic() < deadline, f"not ready in time:\n{server.log_tail()}"
            time.sleep(0.5)
        server.remember_children()
        yield server
    finally:
        server.remember_children()
        _stop(server)


def _stop(server: RayServer) -> None:
    """SIGTERM (the command drains and stops Ray); then, only if needed, SIGKILL by pid."""
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(server.proc.pid, signal.SIGKILL)
            server.proc.wait(timeout=30)
    for pid in server.children:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE:
                server.left_behind.append(pid)
                proc.kill()


@contextlib.contextmanager
def local_server(model: Path) -> Iterator[str]:
    """The default engine on the same model and policy, in this process."""
    port = _free_port()
    app = create_app(load(str(model)), POLICY)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="on", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while not _answers(url + "/readyz"):
        assert time.monotonic() < deadline, "local engine not ready"
        time.sleep(0.1)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)


CONTRACT: list[tuple[str, str, bytes | None]] = [
    ("POST", "/v1/predict", json.dumps({"inputs": ["how do i reset my password"]}).encode()),
    ("POST", "/v1/predict", b'{"inputs": ["a"'),
    ("POST", "/v1/predict", b'["a"]'),
    ("POST", "/v1/predict", b'{"inputs": []}'),
    ("POST", "/v1/predict", b'{"inputs": [3]}'),
    ("POST", "/v1/predict", b'{"inputs": ["a"], "priority": "urgent"}'),
    ("POST", "/v1/predict", b'{"inputs": ["a"], "timeout_ms": -5}'),
    ("POST", "/v1/predict", b'{"inputs": ["a"], "model": "other"}'),
    ("POST", "/v1/predict", json.dumps({"inputs": ["a"] * 65}).encode()),
    ("POST", "/v1/predict", json.dumps({"inputs": ["x" * 1_100_000]}).encode()),
    ("GET", "/v1/predict", None),
    ("GET", "/healthz", None),
    ("GET", "/readyz", None),
    ("GET", "/v1/model", None),
    ("GET", "/openapi.json", None),
    ("POST", "/v1/cache/purge", b"{}"),
    ("GET", "/no/such/route", None),
]


def _stages(header: str) -> list[str]:
    return [part.split(";")[0].strip() for part in header.split(",")]


def check_same_contract(ray_url: str, local_url: str) -> None:
    """Every request gets the same status, body and headers from both engines (outputs equal
    to float tolerance: each engine's torch may sum in a different order)."""
    with httpx.Client(timeout=60) as client:
        for method, path, body in CONTRACT:
            headers = {"content-type": "application/json"} if body is not None else {}
            got = client.request(method, ray_url + path, content=body, headers=headers)
            want = client.request(method, local_url + path, content=body, headers=headers)
            where = f"{method} {path} {(body or b'')[:40]!r}"
            assert got.status_code == want.status_code, (where, got.text, want.text)
            assert got.headers.get("content-type") == want.headers.get("content-type"), where
            assert _stages(got.headers["server-timing"]) == _stages(
                want.headers["server-timing"]), where
            if "json" not in want.headers.get("content-type", ""):
                assert got.content == want.content, where
                continue
            g, w = got.json(), want.json()
            if path == "/readyz":  # the default deadline is measured on each engine
                assert g.keys() == w.keys() and g["status"] == w["status"] == "ready", where
            elif path == "/v1/predict" and got.status_code == 200:
                np.testing.assert_allclose(g.pop("outputs"), w.pop("outputs"), atol=1e-4)
                assert g == w, where
            else:
                assert g == w, where
        metrics = client.get(ray_url + "/metrics")
        assert metrics.status_code == 200 and "infertune_requests_total" in metrics.text


@dataclass
class Sample:
    t: float
    replicas: int
    ongoing: float  # all replicas together


def _signals(text: str) -> tuple[int, float]:
    replicas, ongoing = 0, 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "infertune_replicas":
                replicas = int(s.value)
            elif s.name == "infertune_replica_ongoing_requests":
                ongoing += s.value
    return replicas, ongoing


class Watcher:
    """Polls /metrics twice a second in a thread; ``samples`` is what it saw."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.t0 = time.monotonic()

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=70)

    def replicas(self) -> int:
        return self.samples[-1].replicas if self.samples else 0

    def _run(self) -> None:
        with httpx.Client(timeout=60) as client:
            while not self._stop.is_set():
                try:
                    answer = client.get(self.url + "/metrics")
                    if answer.status_code == 200:
                        r, o = _signals(answer.text)
                        self.samples.append(Sample(time.monotonic() - self.t0, r, o))
                except httpx.HTTPError:
                    pass
                self._stop.wait(0.5)


class Load:
    """Open-loop phases back to back; every request's (sent, done) on the watcher's clock."""

    def __init__(self, url: str, origin: float) -> None:
        self.url = url
        self.origin = origin
        self.records: list[RequestRecord] = []
        self.spans: list[tuple[float, float]] = []

    def phase(self, rate: float, seconds: float, seed: int) -> None:
        rng = np.random.default_rng(seed)
        bodies = [{"inputs": [" ".join(rng.choice(WORDS, size=12)) + f" {seed}-{i}-{j}"
                              for j in range(INPUTS_PER_REQUEST)]} for i in range(64)]
        schedule = build_schedule(ScheduleSpec(shape="poisson", rate=rate, duration_s=seconds,
                                               seed=seed))
        target = HttpTarget(self.url + "/v1/predict", bodies=bodies, timeout_s=180.0)
        start = time.monotonic() - self.origin
        records = asyncio.run(run_schedule(schedule, target, RunOptions()))
        self.records += records
        self.spans += [(start + r.sent_s, start + r.done_s) for r in records]

    def outstanding_before(self, t: float) -> int:
        """Most requests sent and not yet answered at any moment before ``t``: the queue, in
        the proxy and the replicas together, that Ray's autoscaler counts."""
        moments = [s for s, _ in self.spans if s < t]
        return max((sum(1 for s, e in self.spans if s <= m < e) for m in moments), default=0)


def test_ray_engine_matches_the_local_api_and_scales_on_queue_length(
        tmp_path: Path) -> None:
    model = _classifier(tmp_path / "model")
    with ray_server(model, tmp_path) as server:
        document = server.plan()
        plan = document["plan"]
        for name in ("target_ongoing_requests", "min_replicas", "max_replicas",
                     "upscale_delay_s", "downscale_delay_s", "look_back_period_s"):
            assert plan[name]["reasoning"] and plan[name]["value"] > 0, name
        assert document["measured"]["cold_start_s"] > 0
        assert plan["min_replicas"]["value"] == 1  # no traffic facts: a warm pool of one
        if plan["max_replicas"]["value"] < 2:
            pytest.fail(f"this machine's Ray holds one replica only: {plan['max_replicas']}")

        with local_server(model) as local_url:
            check_same_contract(server.url, local_url)

        # rates relative to what the plan measured: the capacity is an upper bound
        capacity = plan["replica_capacity_rps"]["value"] / INPUTS_PER_REQUEST
        with Watcher(server.url) as watch:
            load = Load(server.url, watch.t0)
            load.phase(0.2 * capacity, 5.0, seed=1)
            assert watch.replicas() == 1, watch.samples
            for seed in range(2, 14):  # high until a second replica serves, then a little more
                load.phase(1.5 * capacity, 5.0, seed=seed)
                server.remember_children()
                if watch.replicas() >= 2:
                    load.phase(1.5 * capacity, 3.0, seed=100 + seed)
                    break
            peak = max(s.replicas for s in watch.samples)
            for seed in range(20, 40):  # low until back to the warm pool
                load.phase(0.2 * capacity, 5.0, seed=seed)
                if watch.replicas() == 1:
                    break
            samples = list(watch.samples)
        server.remember_children()
        statuses = {r.status for r in load.records}
        assert statuses == {"200"}, (statuses, server.log_tail())
        assert samples[0].replicas == 1
        assert peak >= 2, ([(s.t, s.replicas, s.ongoing) for s in samples], server.log_tail())
        up_at = next(s.t for s in samples if s.replicas >= 2)
        target = plan["target_ongoing_requests"]["value"]
        # the queue triggered it: more requests waiting or running than the target first
        assert load.outstanding_before(up_at) > target, (up_at, target)
        assert max(s.ongoing for s in samples) > 0  # the per-replica signal is live on /metrics
        assert samples[-1].replicas == 1, [(s.t, s.replicas) for s in samples]
    assert server.proc.returncode == 0, server.log_tail()
    assert server.left_behind == [], "Ray processes outlived serve's SIGTERM"

