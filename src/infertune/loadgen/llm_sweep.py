"""`loadtest --sweep`: the highest request rate whose streaming run meets every token-level SLO.

Each probe is a full open-loop run at one rate (same shape, seed and duration, so the same
guarantees as a single run: latency from the intended send time, client lag reported). The
rate doubles from the starting rate until a probe fails, halves when the first probe already
fails, then bisects between the best passing and the lowest failing rate until they are within
``tolerance`` of each other or ``max_steps`` probes have run.

A probe *passes* when every SLO is met and fewer than ``max_error_share`` of its requests
failed. Client lag only adds to latencies measured from the intended send, so a pass under lag
stands; when the client could not keep up at all (median lag over the runner's warning
threshold) the probe says nothing about the server, and the sweep stops there and says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from infertune.errors import ConfigError
from infertune.loadgen.result import LAG_WARN_MS
from infertune.loadgen.streaming_result import StreamingResult
from infertune.serial import Serial

RunAt = Callable[[float], StreamingResult]


@dataclass
class SweepProbe(Serial):
    rate: float
    result: StreamingResult
    passed: bool
    why: str  # what decided the verdict, in words


@dataclass
class SweepResult(Serial):
    probes: list[SweepProbe]
    best_rate: float | None  # highest passing scheduled rate; None when none passed
    stopped: str  # why the sweep ended
    notes: list[str] = field(default_factory=list)


def judge(result: StreamingResult, max_error_share: float,
          lag_limit_ms: float = LAG_WARN_MS) -> tuple[bool, str, bool]:
    """(passed, why, client_bound) for one probe.

    Latency is taken from the intended send time, so client lag can only make a probe look
    worse: a pass despite lag stands. A fail with a client-lag p99 over the limit says so; a
    probe whose *median* lag is over the limit was driven by a client that could not keep up
    at all, and ends the sweep."""
    load = result.load
    lag = load.client_lag_ms
    if lag["p50"] > lag_limit_ms:
        return False, (f"client-lag p50 {lag['p50']:.1f} ms: the client could not keep up"), True
    failed = load.sent - load.ok
    missed = [f"{v.slo.key} {v.measured_ms:.1f} > {v.slo.limit_ms:g}" if v.measured_ms is not
              None else f"{v.slo.key} not measured" for v in result.slos if not v.met]
    if load.sent and failed / load.sent > max_error_share:
        missed.insert(0, f"{failed} of {load.sent} requests failed")
    if not missed:
        return True, "every SLO met", False
    blame = (f" (client-lag p99 {lag['p99']:.1f} ms is part of it)"
             if lag["p99"] > lag_limit_ms else "")
    return False, "missed " + ", ".join(missed) + blame, False


def sweep(run_at: RunAt, start_rate: float, *, max_steps: int = 8, tolerance: float = 0.1,
          max_error_share: float = 0.01) -> SweepResult:
    """Search rates with ``run_at(rate)`` (one open-loop run each); see the module docstring."""
    if not start_rate > 0:
        raise ConfigError(f"--rate must be > 0 to start a sweep, got {start_rate}")
    if max_steps < 1:
        raise ConfigError(f"--sweep-steps must be >= 1, got {max_steps}")
    probes: list[SweepProbe] = []
    best: float | None = None
    worst: float | None = None  # lowest failing rate
    rate = start_rate
    stopped = f"ran all {max_steps} probes"
    for _ in range(max_steps):
        result = run_at(rate)
        if not result.slos:
            raise ConfigError("--sweep needs token-level SLOs; pass --slo ttft_p95_ms=...")
        passed, why, client_bound = judge(result, max_error_share)
        probes.append(SweepProbe(rate, result, passed, why))
        if client_bound:
            stopped = f"the client could not keep up at {rate:g} req/s; sweep from another core"
            break
        if passed:
            best = rate if best is None else max(best, rate)
        else:
            worst = rate if worst is None else min(worst, rate)
        if best is not None and worst is not None and worst <= best * (1 + tolerance):
            stopped = f"bracketed within {tolerance:.0%}"
            break
        rate = _next_rate(best, worst)
    notes = [] if best is not None else [
        "no probed rate met the SLOs; start lower with --rate"]
    return SweepResult(probes, best, stopped, notes)


def _next_rate(best: float | None, worst: float | None) -> float:
    if worst is None:
        assert best is not None
        return best * 2
    if best is None:
        return worst / 2
    return (best + worst) / 2
