"""Finalists confirmed as served: each finalist configuration (a variant folder and the exact
ServePolicy report.json would name) runs in its own ``infertune serve`` process, the command a
user runs, and is driven over HTTP from this process with the scenario's traffic shape at the
mean and peak rates, in ABBA order under one seeded open-loop schedule per rate.

Why its own process: runtimes sharing a process distort each other's threads (issue 14: one
INT8 model at p50 7.6 ms beside a spinning ONNX Runtime session, 3.7 ms without), and in
production each model runs alone. Why ABBA: A,B,B,A puts each finalist at the same mean
position in time, so a linear drift of the machine adds the same to both.

No server sees a text twice: each rate has its own slice of one seeded order (rate_bodies), and
each arm's second segment at a rate sends the next bodies of that slice, not the first segment's
again (the response cache, on as served, would answer a
replay from memory; before session 5 it did, for half of every finalist's requests).
``bodies`` per rate holds VISITS_PER_ARM sets of one schedule's length, and every arm gets the
same set on the same visit, so the finalists still see the same texts.

Per finalist, the two segments at one rate are pooled: latency percentiles over both segments'
answered requests (from the intended send time), the achieved rate over both, and shed = every
request not answered 2xx (429/503/504 and failures alike). Goodput at a rate is the achieved
rate times the share answered when every SLO percentile held and at most 1% were shed, else 0:
the definition report/run_slo.py prints and benchmarks/closed_loop.py checks.

All finalists' servers start at once (start-up is mostly imports, each in its own process) and
stay up; one is driven at a time while the other idles. Written under <run>/confirm/: each
finalist's policy file (``--config``) and serve log; stages/confirm_served.py adds
confirmation.json.

The winner's extension (``extend``, an ``ExtensionPlan``): the winner is chosen from the ABBA
segments, and where its verdict at a rate is still "not shown" its server, still up, is driven
once more at that rate for what confirm_sizing.project says would decide it, when the budget
left holds it (confirm_sizing.plan_extensions); those answers are pooled with its ABBA ones.
Both looks' intervals are at confirm_sizing.LOOK_CONFIDENCE, so the two looks together keep a
wrong verdict at the single look's 5%.

    abba_order(2) -> [0, 1, 1, 0]           run_abba(...) drives the segments in that order
    pooled(segments, rate) -> Validation    goodput_at(validation, slo) -> req/s within the SLO
    ServedProcess                           start, wait for /readyz, read /v1/config, stop
    confirm(...) -> Confirmation            all of it; choose_winner(...) picks the winner
    extend_winner(...) -> [Extension]       the winner's paid extensions, pooled into its arm
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml

from infertune.errors import InternalError
from infertune.loadgen.result import SHED_STATUSES, RequestRecord, is_ok
from infertune.loadgen.runner import run_schedule
from infertune.loadgen.schedules import Schedule
from infertune.loadgen.targets import HttpTarget
from infertune.measure.summary import quantile_sorted
from infertune.measure.tail_interval import CONFIDENCE
from infertune.optimize.served.ceiling import fits_ceiling
from infertune.optimize.served.confirm_sizing import (
    LOOK_CONFIDENCE,
    DecisiveRun,
    Extension,
    plan_extensions,
    point_verdict,
    project,
)
from infertune.optimize.served.policy_sweep import SimStats, cost_per_1k
from infertune.optimize.served.traffic import (
    MIN_BLOCK_S,
    Validation,
    burst_block_s,
    record_intervals,
)
from infertune.serial import Serial
from infertune.serve.openapi import ConfigBody


class ServeStartError(InternalError):
    """``infertune serve`` did not come up (exited, or not ready in time); the message carries
    the tail of its log."""


@dataclass(frozen=True)
class Finalist:
    """One configuration to confirm: what ``infertune serve <folder> --config <policy>`` runs."""

    variant_id: str
    policy_id: str
    policy: dict[str, Any]  # ServePolicy fields, exactly as report.json's serving.policy
    folder: Path

    @property
    def key(self) -> str:
        return f"{self.variant_id}/{self.policy_id}"


@dataclass(frozen=True)
class Segment:
    """One open-loop run of one finalist at one rate."""

    records: list[RequestRecord]
    duration_s: float  # the schedule's length


@dataclass
class ServedArm(Serial):
    """What one finalist measured as served, pooled over its segments."""

    variant_id: str
    policy_id: str
    pid: int | None  # the serve process's id (never the optimizer's)
    effective_policy: dict[str, Any] | None  # GET /v1/config's policy: what serve ran
    at: dict[str, Validation] = field(default_factory=dict)  # "mean" | "peak" -> pooled
    segments: int = 0  # segments pooled per rate (2 under ABBA)
    error: str | None = None  # why it could not be measured

    @property
    def key(self) -> str:
        return f"{self.variant_id}/{self.policy_id}"


@dataclass
class Confirmation(Serial):
    """The finalists measured each in its own serve process, and the one that won."""

    order: list[str]  # arm keys in the order the segments ran (A, B, B, A)
    arms: list[ServedArm]
    seconds_per_rate: float  # length of one segment at one rate
    optimizer_pid: int  # this process: the client, never a server
    winner: str | None = None  # arm key
    notes: list[str] = field(default_factory=list)
    seed: int | None = None  # of the schedules and the bodies' order, so a replay sends the same
    # one segment's length per rate label (sized to the percentile and the traffic,
    # confirm_sizing.py);
    # a run before session 9 had one length, seconds_per_rate, for both
    seconds_at: dict[str, float] = field(default_factory=dict)
    # per rate label, the run that would decide the SLO verdict there
    decisive: dict[str, DecisiveRun] = field(default_factory=dict)
    # the winner's extension per rate it was projected at (empty: none planned, or a run before
    # the extension existed); a paid one's answers are pooled into the winner's ``at``
    extensions: list[Extension] = field(default_factory=list)

    def extension(self, label: str) -> Extension | None:
        """The winner's paid extension at ``label``, if any."""
        return next((e for e in self.extensions if e.label == label and e.paid), None)

    def arm(self, variant_id: str, policy_id: str) -> ServedArm | None:
        return next((a for a in self.arms if a.variant_id == variant_id
                     and a.policy_id == policy_id and a.error is None), None)

    def how(self, arm: ServedArm, label: str) -> str:
        """How a figure of ``arm`` at ``label`` was measured, for the report's provenance."""
        val = arm.at.get(label)
        n = val.stats.requests if val is not None else 0
        order = ",".join(chr(ord("A") + [a.key for a in self.arms].index(k)) for k in self.order)
        seconds = self.seconds_at.get(label, self.seconds_per_rate)
        ext = self.extension(label) if arm.key == self.winner else None
        more = (f" and the winner's extension of {ext.seconds:g} s" if ext is not None else "")
        return (f"own process (infertune serve, pid {arm.pid}; optimizer pid "
                f"{self.optimizer_pid}), over HTTP, ABBA ({order}), {arm.segments} open-loop "
                f"segments of {seconds:g} s{more} pooled, n={n} at {label} rate "
                "(artifact: confirm/confirmation.json)")


VISITS_PER_ARM = 2  # abba_order runs each arm once forward and once backward


def abba_order(arms: int) -> list[int]:
    """Each arm once forward, then once backward: [0, 1, 1, 0] for two; [0, 0] for one."""
    if arms < 1:
        raise ValueError("ABBA needs at least one arm")
    forward = list(range(arms))
    return forward + forward[::-1]


Drive = Callable[[int, str, float], Segment]  # (arm index, rate label, rate) -> one segment


def run_abba(arms: int, rates: Sequence[tuple[str, float]],
             drive: Drive) -> tuple[list[int], list[dict[str, list[Segment]]]]:
    """Drive every arm at every rate in ABBA order; the order run and each arm's segments."""
    order = abba_order(arms)
    out: list[dict[str, list[Segment]]] = [{label: [] for label, _ in rates}
                                           for _ in range(arms)]
    for arm in order:
        for label, rate in rates:
            out[arm][label].append(drive(arm, label, rate))
    return order, out


def pooled(segments: Sequence[Segment], rate: float, *, block_s: float = MIN_BLOCK_S,
           seed: int = 0, confidence: float = CONFIDENCE) -> Validation:
    """One finalist's figures at one rate over all its segments (see the module docstring),
    each SLO percentile with its interval at ``confidence`` over time blocks of ``block_s``
    (traffic.burst_block_s of the schedule)."""
    records = [r for s in segments for r in s.records]
    sent = len(records)
    ok = np.sort(np.asarray([r.latency_ms for r in records if is_ok(r.status)],
                            dtype=np.float64))
    inf = float("inf")

    def pct(q: float) -> float:
        return float(quantile_sorted(ok, q)) if ok.size else inf

    # sent over the time the schedule took, per segment (a late client stretches it)
    seconds = sum(max(s.duration_s, max((r.sent_s for r in s.records), default=0.0))
                  for s in segments)
    failed = sent - int(ok.size)
    lags = np.asarray([r.lag_ms for r in records], dtype=np.float64)
    stats = SimStats(rate=rate, p50_ms=pct(0.50), p95_ms=pct(0.95), p99_ms=pct(0.99),
                     shed=failed / sent if sent else 1.0, requests=sent)
    sheds = sum(1 for r in records if r.status in SHED_STATUSES)
    warnings = ([f"{failed - sheds} of {sent} requests failed without a shed status"]
                if failed > sheds else [])
    if failed:  # which refusals, so a server that sheds everything says how
        counts = Counter(r.status for r in records if not is_ok(r.status))
        warnings.append("not answered 2xx: " + ", ".join(f"{n} x {st}" for st, n in
                                                          sorted(counts.items())))
    return Validation(stats, sent / seconds if seconds > 0 else 0.0,
                      float(np.percentile(lags, 99)) if lags.size else None,
                      sum(s.duration_s for s in segments), warnings,
                      record_intervals([(s.records, s.duration_s) for s in segments],
                                       block_s=block_s, seed=seed, confidence=confidence))


def goodput_at(val: Validation, slo: dict[str, float]) -> float:
    """Requests/s answered within the SLO at a tested rate: the achieved rate times the share
    answered when every SLO percentile held and at most 1% were shed; 0 otherwise."""
    return val.achieved_rate * (1.0 - val.stats.shed) if val.stats.meets(slo) else 0.0


def served_goodput(arm: ServedArm, slo: dict[str, float]) -> float:
    """The highest goodput the arm measured at any tested rate."""
    return max((goodput_at(v, slo) for v in arm.at.values()), default=0.0)


def request_bodies(inputs: Sequence[Any], count: int, *, seed: int) -> list[dict[str, Any]]:
    """``count`` /v1/predict bodies from the held-out inputs in a seeded order. A text seen
    again gets a round marker appended, so the response cache (on, as served) answers only
    what real traffic would repeat, not the replay; tensors are sent as nested lists."""
    if not inputs:
        raise ValueError("no held-out inputs to send")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(inputs))
    out = []
    for i in range(count):
        item = inputs[int(order[i % len(inputs)])]
        rnd = i // len(inputs)
        if isinstance(item, str) and rnd:
            item = f"{item} ({rnd})"
        out.append({"inputs": [_jsonable(item)]})
    return out


def rate_bodies(inputs: Sequence[Any], counts: Sequence[tuple[str, int]], *,
                seed: int) -> dict[str, list[dict[str, Any]]]:
    """Each rate label's ``count`` bodies, in the order given, as consecutive slices of one
    seeded order (request_bodies): a server driven at every rate is never sent at one rate a
    text it was sent at another. (Each rate once had the whole order from its start: the peak
    re-sent the mean's texts, the response cache answered them from memory, and the demo's
    report said p95 4.3 ms at 60 req/s where a fresh measurement found 26 ms.)"""
    every = request_bodies(inputs, sum(n for _, n in counts), seed=seed)
    out: dict[str, list[dict[str, Any]]] = {}
    start = 0
    for label, n in counts:
        out[label] = every[start:start + n]
        start += n
    return out


def _jsonable(item: Any) -> Any:
    if isinstance(item, np.ndarray):
        return item.tolist()
    if isinstance(item, dict):
        return {k: _jsonable(v) for k, v in item.items()}
    if isinstance(item, np.generic):
        return item.item()
    return item


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServedProcess:
    """``infertune serve FOLDER --config POLICY --port P`` in its own process (log to a file,
    so a chatty server never blocks on a full pipe)."""

    def __init__(self, finalist: Finalist, workdir: Path, *, python: str = sys.executable,
                 port: int | None = None) -> None:
        self.finalist = finalist
        workdir.mkdir(parents=True, exist_ok=True)
        slug = finalist.key.replace("/", "__")
        self.policy_file = workdir / f"{slug}.yaml"
        self.log_file = workdir / f"{slug}.log"
        self.policy_file.write_text(yaml.safe_dump(finalist.policy, sort_keys=True))
        self.port = port or free_port()
        self.command = [python, "-c", "from infertune.cli import entry; entry()", "serve",
                        str(finalist.folder), "--config", str(self.policy_file),
                        "--host", "127.0.0.1", "--port", str(self.port)]
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_error: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        """Start the server; a command that cannot even be run shows in wait_ready."""
        try:
            with self.log_file.open("wb") as log:
                self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            self.start_error = f"could not run {self.command[0]}: {exc}"

    def wait_ready(self, timeout_s: float) -> ConfigBody:
        """Wait for /readyz 200 and return /v1/config; ServeStartError when it exits or is not
        ready in ``timeout_s`` (ValueError when /v1/config is not JSON or not a ConfigBody)."""
        if self.proc is None:
            raise ServeStartError(f"infertune serve {self.finalist.key} did not start: "
                                  f"{self.start_error or 'start() was not called'}")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServeStartError(f"infertune serve {self.finalist.key} exited with code "
                                      f"{self.proc.returncode}: {self.log_tail()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2.0).status_code == 200:
                    data = httpx.get(self.url + "/v1/config", timeout=5.0).json()
                    return ConfigBody.model_validate(data)
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise ServeStartError(f"infertune serve {self.finalist.key} was not ready within "
                              f"{timeout_s:.0f} s: {self.log_tail()}")

    def log_tail(self, chars: int = 400) -> str:
        try:
            text = self.log_file.read_text(errors="replace").strip()
        except OSError:
            return "(no log)"
        return " | ".join(text[-chars:].splitlines()) or "(empty log)"

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


def drive_http(url: str, schedule: Schedule, bodies: list[dict[str, Any]], *,
               timeout_s: float = 10.0) -> Segment:
    """One open-loop segment against a running server: latency from the intended send."""
    target = HttpTarget(url + "/v1/predict", bodies=bodies, timeout_s=timeout_s)
    records = asyncio.run(run_schedule(schedule, target))
    return Segment(records, schedule.duration_s)


Rate = tuple[str, float, Schedule]  # ("mean" | "peak", requests/s, the seeded schedule)


@dataclass(frozen=True)
class ExtensionPlan:
    """What the winner's extension may use; confirm_sizing decides what is paid."""

    decisive: Mapping[str, DecisiveRun]  # per rate label
    targets: Mapping[str, float]  # the SLO, {"p99": ms}
    left_s: Callable[[], float]  # seconds the confirmation may still spend, asked after ABBA
    # (label, rate, seconds) -> a seeded schedule none of the ABBA segments used
    schedule: Callable[[str, float, float], Schedule]
    # (label, count) -> bodies no server was sent before (the response cache is on)
    bodies: Callable[[str, int], list[dict[str, Any]]]


def confirm(finalists: Sequence[Finalist], rates: Sequence[Rate],
            bodies: dict[str, list[dict[str, Any]]], *, workdir: Path, slo: dict[str, float],
            cost_per_hour_usd: float | None, risk: Callable[[str], int],
            start_timeout_s: float,
            launch: Callable[[Finalist, Path], ServedProcess] = ServedProcess,
            drive_segment: Callable[..., Segment] = drive_http, request_timeout_s: float = 10.0,
            on_segment: Callable[[str, str], None] | None = None,
            cost_ceiling_usd_per_1k: float | None = None,
            extend: ExtensionPlan | None = None) -> Confirmation:
    """Start every finalist's server, drive the ready ones one at a time in ABBA order, pick
    the winner, extend it where ``extend`` pays for a decision (module docstring), stop them
    all. A server that does not come up is recorded with the reason and left out.
    ValueError when ``bodies`` holds fewer than VISITS_PER_ARM schedules' worth at a rate."""
    _check_bodies(rates, bodies)
    procs = [launch(f, workdir) for f in finalists]
    arms = [ServedArm(f.variant_id, f.policy_id, None, None) for f in finalists]
    conf = Confirmation([], [], rates[0][2].duration_s if rates else 0.0, os.getpid(),
                        seconds_at={label: sched.duration_s for label, _, sched in rates})
    try:
        _start_all(procs, arms, start_timeout_s, conf.notes)
        live = [i for i, a in enumerate(arms) if a.error is None]
        labels = [(label, rate) for label, rate, _ in rates]
        by_label = {label: sched for label, _, sched in rates}

        visits: Counter[tuple[int, str]] = Counter()

        def drive(index: int, label: str, rate: float) -> Segment:
            i = live[index]
            if on_segment is not None:
                on_segment(arms[i].key, label)
            n, visit = len(by_label[label]), visits[(index, label)]
            visits[(index, label)] += 1
            return drive_segment(procs[i].url, by_label[label],
                                 bodies[label][visit * n:(visit + 1) * n],
                                 timeout_s=request_timeout_s)

        confidence = LOOK_CONFIDENCE if extend is not None else CONFIDENCE
        if live:
            order, segments = run_abba(len(live), labels, drive)
            conf.order = [arms[live[k]].key for k in order]
            for k, i in enumerate(live):
                arms[i].at = {label: pooled(segs, rate, confidence=confidence,
                                            block_s=burst_block_s(by_label[label].spec))
                              for (label, rate), segs in zip(labels, segments[k].values(),
                                                             strict=True)}
                arms[i].segments = order.count(k)
                conf.notes += [f"{arms[i].key} at {label} as served: {'; '.join(v.warnings)}"
                               f" (log: {procs[i].log_file})"
                               for label, v in arms[i].at.items() if v.stats.shed > 0.5]
        conf.arms = arms
        conf.winner = choose_winner([a for a in arms if a.error is None], slo,
                                    cost_per_hour_usd, risk, cost_ceiling_usd_per_1k)
        if extend is not None and conf.winner is not None:
            k = next(k for k, i in enumerate(live) if arms[i].key == conf.winner)
            i = live[k]

            def drive_more(sched: Schedule, label: str) -> Segment:
                if on_segment is not None:
                    on_segment(arms[i].key, f"{label} (extension)")
                return drive_segment(procs[i].url, sched, extend.bodies(label, len(sched)),
                                     timeout_s=request_timeout_s)

            conf.extensions = extend_winner(arms[i], segments[k], dict(labels), extend,
                                            drive_more)
    finally:
        for proc in procs:
            proc.stop()
    return conf


def _check_bodies(rates: Sequence[Rate], bodies: dict[str, list[dict[str, Any]]]) -> None:
    for label, _, sched in rates:
        if len(bodies.get(label, [])) < VISITS_PER_ARM * len(sched):
            raise ValueError(f"confirm: {len(bodies.get(label, []))} bodies at {label}; each "
                             f"arm visits a rate {VISITS_PER_ARM} times and must not send a "
                             f"text twice, so pass {VISITS_PER_ARM} x {len(sched)}")


def _start_all(procs: Sequence[ServedProcess], arms: Sequence[ServedArm],
               start_timeout_s: float, notes: list[str]) -> None:
    """Start every finalist's server at once and wait for each within ``start_timeout_s`` of
    the start; one that does not come up is stopped, its arm given the reason (and a note)."""
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + start_timeout_s
    for proc, arm in zip(procs, arms, strict=True):
        arm.pid = proc.pid
        try:
            config = proc.wait_ready(max(1.0, deadline - time.monotonic()))
            arm.effective_policy = dict(config.policy)
        # ValueError: /v1/config not JSON, or pydantic's ValidationError (a ValueError)
        except (ServeStartError, ValueError) as exc:
            arm.error = str(exc)
            notes.append(f"{arm.key}: not confirmed as served: {exc}")
            proc.stop()


def extend_winner(arm: ServedArm, segments: Mapping[str, list[Segment]],
                  rates: Mapping[str, float], plan: ExtensionPlan,
                  drive: Callable[[Schedule, str], Segment]) -> list[Extension]:
    """The winner's extensions (module docstring): projected from its ABBA figures, paid
    cheapest first within ``plan.left_s()``, each paid one driven by ``drive`` and pooled with
    the ABBA segments into ``arm.at`` (so the report's figures for the winner are the pooled
    ones); the extensions, paid or not, with the verdict after pooling."""
    projected = [project(label, arm.at[label], plan.targets, plan.decisive[label])
                 for label in rates if label in arm.at and label in plan.decisive]
    out = []
    for ext in plan_extensions(projected, plan.left_s()):
        if not ext.paid:
            out.append(ext)
            continue
        rate = rates[ext.label]
        sched = plan.schedule(ext.label, rate, ext.seconds)
        more = drive(sched, ext.label)
        val = pooled([*segments[ext.label], more], rate, confidence=LOOK_CONFIDENCE,
                     block_s=burst_block_s(sched.spec))
        arm.at[ext.label] = val
        out.append(dataclasses.replace(ext, verdict_after=point_verdict(val, plan.targets),
                                       requests_after=val.stats.requests))
    return out


TIE = 0.02  # goodputs (and costs) within 2% of the best are a tie: a load test's noise


def choose_winner(arms: Sequence[ServedArm], slo: dict[str, float],
                  cost_per_hour_usd: float | None, risk: Callable[[str], int],
                  cost_ceiling_usd_per_1k: float | None = None) -> str | None:
    """The highest measured goodput at the SLO; ties (within 2%) go to the lower cost per
    1,000 requests, then the lower risk (``risk``: a rank by variant id, lower is safer), then
    the lower measured tail at peak, then at mean.

    When no finalist has any goodput (none held the SLO at any rate) there is no tie to break
    by risk: the winner is the one closest to the SLO, i.e. the one that answered the larger
    share of requests at peak then at mean (a shed is a miss), then the lower tail, then risk.
    (The demo once picked fp32 over an INT8 variant that shed 18% at peak against its 29%,
    because both had goodput 0 and fp32 carries less risk.)"""
    measured = [a for a in arms if a.at]
    if not measured:
        return None
    good = {a.key: served_goodput(a, slo) for a in measured}
    top = max(good.values())
    tail = max(slo, key=lambda k: int(k[1:])) if slo else "p99"

    def at(a: ServedArm, label: str) -> tuple[float, float]:
        v = a.at.get(label)
        return (v.stats.shed, v.stats.percentile(tail)) if v is not None else (1.0, math.inf)

    if top <= 0:
        return min(measured, key=lambda a: (at(a, "peak")[0], at(a, "mean")[0],
                                            at(a, "peak")[1], at(a, "mean")[1],
                                            risk(a.variant_id))).key
    left = [a for a in measured if good[a.key] >= top * (1 - TIE)]
    # over the cost ceiling never wins over one that fits it, even within the goodput tie
    fits = [a for a in left if fits_ceiling(good[a.key], cost_per_hour_usd,
                                            cost_ceiling_usd_per_1k) is not False]
    left = fits or left
    costs = {a.key: cost_per_1k(cost_per_hour_usd, good[a.key]) for a in left}
    known = [c for c in costs.values() if c is not None]
    if known:
        left = [a for a in left if (c := costs[a.key]) is not None and c <= min(known) * (1 + TIE)]
    return min(left, key=lambda a: (risk(a.variant_id), at(a, "peak")[1],
                                    at(a, "mean")[1])).key

