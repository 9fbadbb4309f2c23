"""What serve's runtime adds to the simulator's picture, measured by one short probe load test,
so that the simulator's predictions at other rates account for it.

The simulator (simulate.py) models the queue and the batcher, fed a service time measured with
the model called alone. Served, two things differ, and both are measured from a probe run
through serve's runtime (loadgen's InProcessTarget or an HTTP server):

- **slowdown**: a batch's model call runs on a worker thread beside the event loop (and, in
  process, the load generator); on a small machine it takes longer than when called alone.
  The factor is the ratio of the probe's batch times to the isolated ones, per batch size,
  combined over sizes weighted by the batches the probe ran of each.
- **turn-around**: between one batch and the next the worker is also held by the hand-off of
  the answer back to the event loop and the forming of the next batch on that loop (shared,
  in process, with the load generator). It is not seen in any stage time, so it is fitted:
  the fixed time per batch that makes the simulator form batches of the size the probe
  measured (a longer occupancy makes requests wait longer and batches larger).
- **outside time**: time a request spends neither queued nor in the model: the event loop's
  turn-around, the hand-offs to and from the worker thread, the HTTP exchange and the client's
  own lag. Per request it is the measured end-to-end latency minus the server's stage times
  (Server-Timing: queue + preprocess + inference + postprocess); the simulator draws from
  these samples for every simulated request.

The model of the server stays the simulator's; only its inputs are calibrated. A calibration
holds for the machine, model and load-generator placement it was measured with, and the
prediction it feeds is labelled as calibrated from that probe (``source``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from infertune.config import ServePolicy
from infertune.loadgen.schedules import Schedule
from infertune.loadgen.simulate import EmpiricalServiceTime, ServiceTime, simulate

STAGES = ("queue", "preprocess", "inference", "postprocess")


@dataclass(frozen=True)
class RuntimeCalibration:
    slowdown: float  # probe batch time / isolated batch time (1.0 = as fast as alone)
    turnaround_ms: float  # fitted worker time per batch outside the model call
    outside_ms: tuple[float, ...]  # per probe request: latency - server stage times, ms
    batches: int  # probe batches the slowdown comes from
    source: str

    @property
    def outside_p50_ms(self) -> float:
        return float(np.median(self.outside_ms)) if self.outside_ms else 0.0

    def outside_draws(self, n: int, seed: int = 0) -> np.ndarray:
        """``n`` outside times drawn (seeded) from the probe's, for ``simulate(outside_ms=)``."""
        if not self.outside_ms:
            return np.zeros(n)
        rng = np.random.default_rng(seed)
        return rng.choice(np.asarray(self.outside_ms), size=n)


class CalibratedServiceTime:
    """``inner``'s service time times the probe's slowdown, plus the turn-around per batch
    (the ServiceTime protocol)."""

    def __init__(self, inner: ServiceTime, slowdown: float, turnaround_ms: float = 0.0) -> None:
        self.inner, self.slowdown, self.turnaround_ms = inner, slowdown, turnaround_ms
        self.stochastic = bool(getattr(inner, "stochastic", False))

    def latency_ms(self, batch_size: int, seq_len: int | None = None) -> float:
        return self.inner.latency_ms(batch_size, seq_len) * self.slowdown + self.turnaround_ms


def calibrate(isolated_ms: Mapping[int, Sequence[float]],
              probe_batch_ms: Mapping[int, Sequence[float]],
              probe_requests: Sequence[tuple[float, Mapping[str, float]]],
              *, source: str, probe: Probe | None = None) -> RuntimeCalibration:
    """The calibration from an isolated service-time measurement (ms per batch size), the batch
    times observed during the probe (ms per batch size, preprocess to postprocess as the worker
    ran them) and the probe's successful requests as (latency ms, Server-Timing ms per stage).
    With ``probe`` (its arrivals, policy and measured mean batch size) the turn-around is
    fitted, else it is 0. ValueError when the probe ran no batch of a size measured alone, or
    answered no request."""
    sizes = [b for b in probe_batch_ms if probe_batch_ms[b] and isolated_ms.get(b)]
    if not sizes:
        raise ValueError("the probe ran no batch of a size that was measured alone; run the "
                         "probe longer or measure more batch sizes alone")
    if not probe_requests:
        raise ValueError("the probe answered no request; lower its rate or check the server")
    weights = np.array([len(probe_batch_ms[b]) for b in sizes], dtype=np.float64)
    ratios = np.array([np.median(probe_batch_ms[b]) / np.median(isolated_ms[b]) for b in sizes])
    slowdown = float(np.exp(np.average(np.log(ratios), weights=weights)))
    outside = tuple(max(0.0, latency - sum(stages.get(k, 0.0) for k in STAGES))
                    for latency, stages in probe_requests)
    turnaround = 0.0
    if probe is not None:
        turnaround = fit_turnaround(probe, CalibratedServiceTime(
            EmpiricalServiceTime(dict(isolated_ms), seed=probe.seed), slowdown))
    return RuntimeCalibration(slowdown=slowdown, turnaround_ms=turnaround, outside_ms=outside,
                              batches=int(weights.sum()), source=source)


@dataclass(frozen=True)
class Probe:
    """What the turn-around is fitted to: the probe's arrivals (s), the policy it ran and the
    mean batch size the runtime formed."""

    arrivals: Schedule
    policy: ServePolicy
    mean_batch: float
    seed: int = 0


def fit_turnaround(probe: Probe, service: CalibratedServiceTime, *, steps: int = 20) -> float:
    """The turn-around (ms per batch, >= 0) at which the simulated mean batch size matches
    the probe's: bisection, as the mean batch grows with the worker's occupancy per batch. 0
    when the simulator already forms batches at least that large with none."""

    def mean_batch(turnaround: float) -> float:
        trial = CalibratedServiceTime(service.inner, service.slowdown, turnaround)
        return simulate(probe.arrivals, trial, probe.policy).mean_batch_size

    if mean_batch(0.0) >= probe.mean_batch:
        return 0.0
    low, high = 0.0, max(1.0, service.latency_ms(1))
    while mean_batch(high) < probe.mean_batch and high < 1e4:
        low, high = high, high * 2
    for _ in range(steps):
        mid = (low + high) / 2
        low, high = (mid, high) if mean_batch(mid) < probe.mean_batch else (low, mid)
    return (low + high) / 2
