"""`infertune serve RUN --engine ray` under an open-loop step above the forecast, on this machine:
Poisson --rate req/s (default 200) for --seconds (default 40) against the command as a user
starts it, printing

  answered / refused / timed out   every request's outcome: 200, 503/429 (split into Ray's
                                   router refusing at max_queued_requests and infertune's own
                                   admission in a replica), no answer within --client-timeout-s
  time to answer and to refusal    p50 / p99 / max from each request's intended send time (open
                                   loop: a stall is never hidden), and how many took longer than
                                   the plan's deadline plus one full-batch time
  Retry-After                      the share of refusals that carry it
  replicas over time               Ray Serve's RUNNING count (polled from this driver every
                                   --poll-s), and when the deployment first ran more than the
                                   warm pool

The command's own plan (ray_autoscaling.json, saved where the command saves it) gives the
deadline, the batch time and the bounds printed beside the counts. Every request carries new
texts, so no replica's cache answers. The server, Ray's proxy and this load generator share the
machine's cores; the client lag (intended -> sent) is printed so a saturated load generator
shows.

    .venv/bin/python benchmarks/ray_scaling.py runs/demo                 # about 2 minutes
    .venv/bin/python benchmarks/ray_scaling.py runs/demo --rate 100 --seconds 10
"""

from __future__ import annotations

import argparse
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from infertune.loadgen.result import RequestRecord
from infertune.loadgen.runner import RunOptions, run_schedule
from infertune.loadgen.schedules import ScheduleSpec, build_schedule
from infertune.loadgen.targets import Reply

WORDS = ("how do i reset my password the quarterly report shows revenue grew while costs "
         "stayed flat fast inference matters when users wait for every answer").split()
RAY_REFUSAL = b"Request dropped due to backpressure"  # Ray Serve's max_queued_requests answer


@dataclass
class Outcome:
    """What one answer said beyond its status (kept by RecordingTarget, by request index)."""

    by_ray: bool = False
    retry_after: bool = False


class RecordingTarget:
    """POSTs JSON bodies like loadgen's HttpTarget and keeps who refused and Retry-After."""

    name = "ray_scaling"

    def __init__(self, url: str, bodies: list[dict[str, Any]], timeout_s: float) -> None:
        self.url = url
        self._payloads = [json.dumps(b).encode() for b in bodies]
        self.timeout_s = timeout_s
        self.outcomes: dict[int, Outcome] = {}
        self._session: Any = None

    async def open(self) -> None:
        import aiohttp

        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=self.timeout_s))

    async def send(self, index: int) -> Reply:
        import aiohttp

        payload = self._payloads[index % len(self._payloads)]
        try:
            async with self._session.post(self.url, data=payload,
                                          headers={"Content-Type": "application/json"}) as resp:
                body = await resp.read()
                self.outcomes[index] = Outcome(RAY_REFUSAL in body[:200],
                                               "Retry-After" in resp.headers)
                return Reply(str(resp.status))
        except TimeoutError:
            return Reply("timeout")
        except aiohttp.ClientConnectionError:
            return Reply("connection_error")
        except aiohttp.ClientError:
            return Reply("error")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    url: str
    plan_path: Path
    log: Path

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(target: str, extra: list[str], workdir: Path, timeout_s: float) -> Server:
    """`infertune serve TARGET --engine ray` in its own session; returns once it answers
    /readyz and its plan is saved (in the run folder, else the working directory)."""
    port = free_port()
    run = Path(target)
    plan_path = (run if (run / "report.json").is_file() else workdir) / "ray_autoscaling.json"
    with contextlib.suppress(FileNotFoundError):
        plan_path.unlink()  # an earlier run's plan must not pass for this one's
    log = workdir / "ray_scaling_serve.log"
    cli = Path(sys.executable).parent / "infertune"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(cli), "serve", target, "--engine", "ray", "--port",
                                 str(port), *extra], cwd=workdir, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    server = Server(proc, f"http://127.0.0.1:{port}", plan_path, log)
    give_up = time.monotonic() + timeout_s
    while not (plan_path.is_file() and _ready(server.url)):
        if proc.poll() is not None:
            raise SystemExit(f"serve --engine ray exited:\n{server.tail()}")
        if time.monotonic() > give_up:
            stop_server(server)
            raise SystemExit(f"serve --engine ray not ready in {timeout_s:g} s:\n{server.tail()}")
        time.sleep(0.5)
    return server


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def stop_server(server: Server) -> int:
    """SIGTERM (the command drains and stops its Ray); SIGKILL only if that hangs."""
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(server.proc.pid, signal.SIGKILL)
            server.proc.wait(timeout=30)
    return int(server.proc.returncode)


class ReplicaWatcher:
    """Ray Serve's RUNNING replica count, polled by a driver joined to the command's cluster."""

    def __init__(self, address: str, poll_s: float) -> None:
        import ray
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )

        # Ray sends this user's token to an explicit address only when told to (it does so
        # itself for address="auto", which would pick whichever cluster started last); this
        # is the cluster the command under test started
        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
        ray.init(address=address, log_to_driver=False, logging_level="error")
        self.poll_s = poll_s
        self.seen: list[tuple[float, int]] = []
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ReplicaWatcher:
        self.t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        import ray

        self._stop.set()
        self._thread.join(timeout=30)
        ray.shutdown()  # this driver only: the command's cluster runs on

    def _run(self) -> None:
        from ray import serve

        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # a status call during a redeploy may fail
                app = serve.status().applications.get("infertune")
                states = app.deployments["infertune"].replica_states if app else {}
                running = sum(n for s, n in states.items() if str(s).endswith("RUNNING"))
                self.seen.append((time.monotonic() - self.t0, int(running)))
            self._stop.wait(self.poll_s)


def send(url: str, rate: float, seconds: float, seed: int,
         timeout_s: float) -> tuple[list[RequestRecord], RecordingTarget]:
    rng = np.random.default_rng(seed)
    bodies = [{"inputs": [" ".join(rng.choice(WORDS, size=10)) + f" {seed}.{i}"]}
              for i in range(int(rate * seconds * 1.3) + 64)]
    schedule = build_schedule(ScheduleSpec(shape="poisson", rate=rate, duration_s=seconds,
                                           seed=seed))
    target = RecordingTarget(url + "/v1/predict", bodies, timeout_s)
    records = asyncio.run(run_schedule(schedule, target, RunOptions(seed=seed)))
    return records, target


def bounds(plan_doc: dict[str, Any]) -> tuple[float, float]:
    """(deadline s, one full-batch time s) from the command's saved plan."""
    plan = plan_doc["plan"]
    service = plan_doc["measured"]["service_ms"]
    return float(plan["deadline_s"]["value"]), max(float(v) for v in service.values()) / 1000


@dataclass
class Summary:
    n: int
    answered: list[float] = field(default_factory=list)  # latencies, ms
    refused_ray: list[float] = field(default_factory=list)
    refused_replica: list[float] = field(default_factory=list)
    timed_out: int = 0
    other: dict[str, int] = field(default_factory=dict)
    retry_after: int = 0


def summarise(records: list[RequestRecord], target: RecordingTarget) -> Summary:
    out = Summary(len(records))
    for r in records:
        outcome = target.outcomes.get(r.index, Outcome())
        if r.status == "200":
            out.answered.append(r.latency_ms)
        elif r.status in ("503", "429"):
            (out.refused_ray if outcome.by_ray else out.refused_replica).append(r.latency_ms)
            out.retry_after += outcome.retry_after
        elif r.status == "timeout":
            out.timed_out += 1
        else:
            out.other[r.status] = out.other.get(r.status, 0) + 1
    return out


def _pct(values: list[float]) -> str:
    if not values:
        return "none"
    p50, p99 = np.percentile(values, [50, 99])
    return f"p50 {p50:.0f} ms, p99 {p99:.0f} ms, max {max(values):.0f} ms"


def report(s: Summary, records: list[RequestRecord], watch: ReplicaWatcher, plan: dict[str, Any],
           rate: float, seconds: float) -> dict[str, Any]:
    deadline, batch = bounds(plan)
    limit_ms = (deadline + batch) * 1000
    refused = s.refused_ray + s.refused_replica
    late_answers = sum(v > limit_ms for v in s.answered)
    late_refusals = sum(v > limit_ms for v in refused)
    lag = [r.lag_ms for r in records]
    warm = int(plan["plan"]["min_replicas"]["value"])
    top = int(plan["plan"]["max_replicas"]["value"])
    above = next((t for t, n in watch.seen if n > warm), None)
    print(f"\n{rate:g} req/s Poisson for {seconds:g} s (this machine, shared with whatever else "
          f"runs on it): {s.n} requests, achieved {s.n / seconds:.1f} req/s, client lag p99 "
          f"{np.percentile(lag, 99):.0f} ms")
    print(f"  plan: deadline {deadline * 1000:g} ms + one full batch {batch * 1000:.1f} ms = "
          f"{limit_ms:.1f} ms; max_queued_requests "
          f"{plan['plan']['max_queued_requests']['value']:g}; replicas {warm}..{top}")
    print(f"  answered (200): {len(s.answered)}  ({_pct(s.answered)}); past {limit_ms:.0f} ms: "
          f"{late_answers}")
    print(f"  refused (503/429): {len(refused)}  by Ray's router {len(s.refused_ray)}, by a "
          f"replica's admission {len(s.refused_replica)}; time to refusal {_pct(refused)}; "
          f"past {limit_ms:.0f} ms: {late_refusals}; with Retry-After: {s.retry_after}")
    print(f"  timed out (no answer in the client's timeout): {s.timed_out}"
          + (f"; other: {s.other}" if s.other else ""))
    timeline = ", ".join(f"{t:.0f}s:{n}" for t, n in _every(watch.seen, 2.0))
    print(f"  replicas RUNNING over time: {timeline}")
    print(f"  most replicas: {max((n for _, n in watch.seen), default=0)}; first above the warm "
          f"pool of {warm}: " + (f"{above:.1f} s into the step" if above is not None else "never"))
    return {"rate": rate, "seconds": seconds, "n": s.n, "answered": len(s.answered),
            "refused_ray": len(s.refused_ray), "refused_replica": len(s.refused_replica),
            "timed_out": s.timed_out, "other": s.other, "retry_after": s.retry_after,
            "limit_ms": limit_ms, "late_answers": late_answers, "late_refusals": late_refusals,
            "answered_ms": s.answered, "refused_ms": refused, "replicas": watch.seen,
            "first_above_warm_pool_s": above}


def _every(seen: list[tuple[float, int]], step: float) -> list[tuple[float, int]]:
    out: list[tuple[float, int]] = []
    for t, n in seen:
        if not out or t - out[-1][0] >= step or n != out[-1][1]:
            out.append((t, n))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", help="a run folder (or any model reference serve takes)")
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--client-timeout-s", type=float, default=30.0)
    parser.add_argument("--warm-s", type=float, default=3.0,
                        help="untimed traffic at 10%% of --rate first (the proxy's first "
                        "connections and the replica's first requests are slow)")
    parser.add_argument("--poll-s", type=float, default=0.5)
    parser.add_argument("--ray-address", default=None,
                        help="pass --ray-address to serve (default: its embedded Ray)")
    parser.add_argument("--start-timeout-s", type=float, default=300.0)
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    args = parser.parse_args()

    extra = ["--ray-address", args.ray_address] if args.ray_address else []
    workdir = Path.cwd()
    print(f"starting infertune serve {args.target} --engine ray ...", flush=True)
    server = start_server(args.target, extra, workdir, args.start_timeout_s)
    try:
        plan = json.loads(server.plan_path.read_text())
        for line in server.tail().splitlines():
            if " = " in line and ": " in line and not line.startswith("INFO"):
                print("  " + line[:220])
        send(server.url, 0.1 * args.rate, args.warm_s, seed=1, timeout_s=args.client_timeout_s)
        with ReplicaWatcher(plan["cluster_address"], args.poll_s) as watch:
            records, target = send(server.url, args.rate, args.seconds, seed=2,
                                   timeout_s=args.client_timeout_s)
        out = report(summarise(records, target), records, watch, plan, args.rate, args.seconds)
    finally:
        code = stop_server(server)
    print(f"  serve exited {code} after SIGTERM")
    if args.json:
        args.json.write_text(json.dumps({**out, "plan": plan, "exit": code}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
