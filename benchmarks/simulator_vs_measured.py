"""Predicted (simulator) vs measured (in-process load test) p95 for one model and batching
policy at three loads, and the simulator's speed in policies per minute.

The model is a small torch MLP (random weights, one intra-op thread) run through a
TensorAdapter. Steps, all in this one run on this machine:
  1. measure the batch service time: predict() on batches of 1..max_batch_size, interleaved,
     ``--reps`` times each -> an EmpiricalServiceTime (the measured samples, drawn at random);
  2. a probe load test at predicted utilisation 0.5 (its own seed) through serve's runtime
     calibrates what the runtime adds (loadgen/calibrate.py): the slowdown of a batch served
     beside the event loop against the same batch alone, and each request's time outside the
     queue and the model (event loop, thread hand-offs, the in-process client);
  3. for each load (the rate at which the simulator predicts a worker utilisation of 0.4,
     0.6 and 0.8: near 1 any p95 prediction is ill-conditioned, since it diverges with the
     smallest error in the service time), re-measure the service samples (this machine is
     shared; its speed drifts), build one seeded Poisson schedule, simulate it raw and
     calibrated, then send the same schedule to the model served in-process by serve's own
     runtime (queue, batcher, deadlines; response cache off); print the p95s side by side
     and whether the calibrated prediction is within +-20% of the measurement at every load;
  4. steps 2-3 run twice by default, one after the other: with serve's cores idle between
     requests, then kept awake (ServePolicy.keep_cores_awake: an idle-class spinner per core,
     serve/keep_awake.py), each with its own probe, and the two verdicts are printed side by
     side. On a VM a halted core wakes late, which the simulator does not model. In the awake
     arm the isolated service times are measured with the spinners running too;
  5. time a sweep of simulated policies.

    .venv/bin/python benchmarks/simulator_vs_measured.py [--duration 8] [--reps 60]
        [--keep-cores-awake both|on|off]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np
import psutil


def build_adapter(width: int) -> object:
    import torch

    from infertune.models.adapter import ModelInfo
    from infertune.models.runners import TorchRunner
    from infertune.models.tensor import TensorAdapter

    torch.manual_seed(0)
    torch.set_num_threads(1)
    module = torch.nn.Sequential(
        torch.nn.Linear(256, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
        torch.nn.ReLU(), torch.nn.Linear(width, 16)).eval()
    info = ModelInfo(id="mlp", version="bench", kind="tensor", task="other", runtime="torch",
                     input_names=["input"])
    example = {"input": np.zeros(256, dtype=np.float32)}
    return TensorAdapter(info, TorchRunner(module, ["input"]), example)


class BatchTimes:
    """The adapter as served, recording each model call's batch size and seconds (as the
    runtime's worker threads run it: preprocess -> forward -> postprocess)."""

    def __init__(self, adapter: object) -> None:
        self.inner = adapter
        self.info = adapter.info  # type: ignore[attr-defined]
        self.batch_ms: dict[int, list[float]] = {}
        self._start: dict[int, float] = {}

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def preprocess(self, raw: list[object]) -> object:
        start = time.perf_counter()
        feeds = self.inner.preprocess(raw)  # type: ignore[attr-defined]
        self._start[id(feeds)] = start
        return feeds

    def postprocess(self, outputs: object, feeds: object) -> list[object]:
        rows = self.inner.postprocess(outputs, feeds)  # type: ignore[attr-defined]
        start = self._start.pop(id(feeds), None)
        if start is not None:
            ms = (time.perf_counter() - start) * 1000.0
            self.batch_ms.setdefault(len(rows), []).append(ms)
        return rows

    def reset(self) -> None:
        self.batch_ms = {}


def measure_service(adapter: object, max_batch: int, reps: int,
                    awake: bool = False) -> dict[int, list[float]]:
    """Batch times of 1..max_batch alone, interleaved; ``awake``: with serve's core spinners
    running meanwhile."""
    from infertune.serve.keep_awake import CoreSpinners

    spinners = CoreSpinners() if awake else None
    if spinners is not None:
        spinners.start()
    try:
        return _batch_times(adapter, max_batch, reps)
    finally:
        if spinners is not None:
            spinners.stop()


def _batch_times(adapter: object, max_batch: int, reps: int) -> dict[int, list[float]]:
    inputs = adapter.sample_inputs(max_batch)  # type: ignore[attr-defined]
    samples: dict[int, list[float]] = {b: [] for b in range(1, max_batch + 1)}
    for _ in range(3):  # warm-up
        adapter.predict(inputs)  # type: ignore[attr-defined]
    for _ in range(reps):
        for b in samples:  # interleaved, so drift in machine load hits every size alike
            start = time.perf_counter()
            adapter.predict(inputs[:b])  # type: ignore[attr-defined]
            samples[b].append((time.perf_counter() - start) * 1000.0)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per load")
    parser.add_argument("--reps", type=int, default=60)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--max-wait-ms", type=float, default=4.0)
    parser.add_argument("--utilisations", type=float, nargs=3, default=[0.4, 0.6, 0.8])
    parser.add_argument("--keep-cores-awake", choices=["off", "on", "both"], default="both",
                        help="serve with its cores kept awake (serve/keep_awake.py), not, or "
                        "both one after the other (default)")
    args = parser.parse_args()

    from infertune.config import ServePolicy

    adapter = build_adapter(args.width)
    samples = measure_service(adapter, args.max_batch, args.reps)
    policy = ServePolicy(max_batch_size=args.max_batch, max_wait_ms=args.max_wait_ms,
                         workers=1, max_queue=100_000, cache_size=0)
    t1 = float(np.median(samples[1]))
    tmax = float(np.mean(samples[args.max_batch]))
    capacity = args.max_batch / tmax * 1000.0
    print(f"service time (measured here, {args.reps} reps): batch 1 p50 {t1:.2f} ms, "
          f"batch {args.max_batch} mean {tmax:.2f} ms -> capacity {capacity:.0f} req/s")
    print(f"policy: max_batch_size={policy.max_batch_size} max_wait_ms={policy.max_wait_ms} "
          f"workers={policy.workers}")
    inputs = adapter.sample_inputs(64)  # type: ignore[attr-defined]
    settings = {"off": [False], "on": [True], "both": [False, True]}[args.keep_cores_awake]
    verdicts = {}
    for awake in settings:
        print(f"\n== cores kept awake (serve's keep_cores_awake): {'on' if awake else 'off'}")
        verdicts[awake] = compare(adapter, samples, policy.model_copy(
            update={"keep_cores_awake": awake}), capacity, inputs, args)
    if len(verdicts) == 2:
        print(f"\nside by side: within +-20% at every load with the cores kept awake: "
              f"{'yes' if verdicts[True] else 'no'}; with idle cores: "
              f"{'yes' if verdicts[False] else 'no'}")

    curve_speed(samples)


def compare(adapter: object, samples: dict[int, list[float]], policy: object, capacity: float,
            inputs: list[object], args: argparse.Namespace) -> bool:
    """Probe, calibrate, then predict and measure at each load; True when the calibrated
    prediction is within +-20% of the measurement at every load."""
    from infertune.loadgen import (
        EmpiricalServiceTime,
        InProcessTarget,
        ScheduleSpec,
        build_schedule,
        simulate,
        summarise,
    )
    from infertune.loadgen.calibrate import CalibratedServiceTime, calibrate

    # The isolated service times are measured as the server will run: with the spinners
    # running when it keeps its cores awake. (Before this, the awake arm missed +-20% in 2 runs
    # of 3, low each time; a spinner's cost to the model was not measured on its own.)
    awake = bool(getattr(policy, "keep_cores_awake", False))
    samples = measure_service(adapter, args.max_batch, args.reps, awake)
    probe_rate = rate_for_utilisation(0.5, capacity, samples, policy, args.duration)
    probe = build_schedule(ScheduleSpec(shape="poisson", rate=probe_rate,
                                        duration_s=args.duration, seed=99))
    timed = BatchTimes(adapter)
    probe_target = InProcessTarget(timed, policy, inputs)  # type: ignore[arg-type]
    records = asyncio.run(run_and_record(probe, probe_target, timed))
    cal = calibrate(samples, timed.batch_ms,
                    [(r.latency_ms, r.server_timing_ms) for r in records if r.status == "200"],
                    source=f"probe at {probe_rate:.0f} req/s (utilisation 0.5), in process")
    print(f"calibration ({cal.source}, {cal.batches} batches, mean batch "
          f"{probe_target.mean_batch_size():.2f}): slowdown {cal.slowdown:.3f}, "
          f"outside time p50 {cal.outside_p50_ms:.2f} ms, "
          f"p95 {np.percentile(cal.outside_ms, 95):.2f} ms")
    print("load = predicted worker utilisation the rate was chosen for; raw = the simulator "
          "fed the isolated service times; cal = the same, calibrated by the probe; "
          "ratio = pred/meas p95; srv p95 = measured p95 of queue + inference alone; "
          "post-hoc = the simulator fed the batch service times observed during the run (a "
          "check of the queueing model alone, not a prediction); run slowdown = this run's "
          "batch times / the isolated ones measured just before it (the probe's figure, "
          "measured at this load); steal % = the host's share of all cores during the run")
    print(f"{'load':>5} {'rate/s':>7} {'n':>6} {'raw p95':>8} {'cal p95':>8} {'meas p95':>9} "
          f"{'raw ratio':>9} {'cal ratio':>9} {'srv p95':>8} {'post-hoc':>8} "
          f"{'cal p50':>8} {'meas p50':>9} {'pred batch':>10} {'meas batch':>10} "
          f"{'meas ok':>8} {'lag p99':>8} {'meas p95 95% CI':>16} {'run slowdown':>12} "
          f"{'steal %':>7}")
    ratios, allowed = [], []
    for i, load in enumerate(args.utilisations):
        rate = rate_for_utilisation(load, capacity, samples, policy, args.duration)
        schedule = build_schedule(ScheduleSpec(shape="poisson", rate=rate,
                                               duration_s=args.duration, seed=100 + i))
        fresh = measure_service(adapter, args.max_batch, args.reps, awake)
        raw = simulate(schedule, EmpiricalServiceTime(fresh, seed=i), policy)
        predicted = simulate(schedule, CalibratedServiceTime(EmpiricalServiceTime(fresh, seed=i),
                                                             cal.slowdown),
                             policy, outside_ms=cal.outside_draws(len(schedule), seed=i))
        timed = BatchTimes(adapter)
        target = InProcessTarget(timed, policy, inputs)  # type: ignore[arg-type]
        steal_before = psutil.cpu_times()
        records = asyncio.run(run_and_record(schedule, target, timed))
        steal = steal_share(steal_before, psutil.cpu_times())
        measured = summarise(target.name, records, schedule.stats())
        # the slowdown this run's own batches show against the isolated times measured just
        # before it; far from the probe's, the machine changed between probe and run
        in_run_slowdown = calibrate(
            fresh, timed.batch_ms,
            [(r.latency_ms, r.server_timing_ms) for r in records if r.status == "200"],
            source="this run").slowdown
        server = [r.server_timing_ms["queue"] + r.server_timing_ms["inference"]
                  for r in records if r.status == "200"]
        in_run = EmpiricalServiceTime(timed.batch_ms, seed=i)
        post_hoc = simulate(schedule, in_run, policy)
        assert measured.latency is not None and predicted.p95_ms is not None
        assert raw.p95_ms is not None
        ratio = predicted.p95_ms / measured.latency.p95
        ratios.append(ratio)
        ci = measured.latency.percentiles["p95"]
        low, high = ci.low or measured.latency.p95, ci.high or measured.latency.p95
        # could the true p95 (sampling error only) be one the prediction is within +-20% of?
        allowed.append(low <= predicted.p95_ms / 0.8 and predicted.p95_ms / 1.2 <= high)
        print(f"{load:5.2f} {rate:7.1f} {len(schedule):6d} {raw.p95_ms:8.2f} "
              f"{predicted.p95_ms:8.2f} {measured.latency.p95:9.2f} "
              f"{raw.p95_ms / measured.latency.p95:9.2f} {ratio:9.2f} "
              f"{np.percentile(server, 95):8.2f} {post_hoc.p95_ms:8.2f} "
              f"{predicted.p50_ms:8.2f} {measured.latency.p50:9.2f} "
              f"{predicted.mean_batch_size:10.2f} {target.mean_batch_size():10.2f} "
              f"{measured.ok:8d} {measured.client_lag_ms['p99']:8.2f} "
              f"{f'{low:.2f}-{high:.2f}':>16} {in_run_slowdown:12.3f} {steal:7.2f}")
    within = all(0.8 <= r <= 1.2 for r in ratios)
    print(f"verdict: calibrated predicted p95 / measured p95 = "
          f"{', '.join(f'{r:.2f}' for r in ratios)} at loads "
          f"{', '.join(f'{u:.1f}' for u in args.utilisations)}: "
          f"{'within' if within else 'NOT within'} +-20% at every load")
    if not within:
        if all(allowed):
            why = ("could explain the miss: at every load the measured p95's 95% CI holds a "
                   "value the prediction is within +-20% of")
        else:
            why = ("cannot explain the miss: at some load the measured p95's 95% CI holds no "
                   "value the prediction is within +-20% of")
        print(f"  sampling error alone {why} (the machine's drift between runs is not in "
              "that CI)")
    return within


def steal_share(before: object, after: object) -> float:
    """Percent of all cores' time the hypervisor held them between two psutil.cpu_times()
    (0 where the kernel reports no steal)."""
    total = sum(after) - sum(before)  # type: ignore[call-overload]
    stolen = getattr(after, "steal", 0.0) - getattr(before, "steal", 0.0)
    return 100.0 * stolen / total if total > 0 else 0.0


async def run_and_record(schedule: object, target: object, timed: BatchTimes) -> list[object]:
    """run_schedule with the warm-up's model calls left out of the recorded batch times."""
    from infertune.loadgen import run_schedule

    opened = target.open  # type: ignore[attr-defined]

    async def open_then_reset() -> None:
        await opened()
        timed.reset()

    target.open = open_then_reset  # type: ignore[attr-defined]
    return await run_schedule(schedule, target)  # type: ignore[arg-type]


def rate_for_utilisation(target: float, capacity: float, samples: dict[int, list[float]],
                         policy: object, duration: float) -> float:
    """Bisect the Poisson rate whose simulated utilisation is ``target``."""
    from infertune.loadgen import EmpiricalServiceTime, ScheduleSpec, build_schedule, simulate

    low, high = 0.5, capacity
    for _ in range(14):
        mid = (low + high) / 2
        schedule = build_schedule(ScheduleSpec(shape="poisson", rate=mid, duration_s=duration * 4,
                                               seed=7))
        util = simulate(schedule, EmpiricalServiceTime(samples, seed=7), policy).utilisation
        low, high = (mid, high) if util < target else (low, mid)
    return (low + high) / 2


def curve_speed(samples: dict[int, list[float]]) -> None:
    from infertune.config import ServePolicy
    from infertune.loadgen import ScheduleSpec, build_schedule, simulate
    from infertune.measure.curve import CurvePoint, ServiceCurve

    points = [CurvePoint(batch_size=b, seq_len=None, p50_ms=float(np.median(v)),
                         p95_ms=float(np.percentile(v, 95)), mean_ms=float(np.mean(v)),
                         samples=len(v), throughput_per_s=b / float(np.median(v)) * 1000)
              for b, v in samples.items()]
    curve = ServiceCurve(points=points)
    schedule = build_schedule(ScheduleSpec(shape="gamma", rate=300, burstiness=0.5,
                                           duration_s=20, seed=5))
    policies = [ServePolicy(max_batch_size=b, max_wait_ms=w, workers=k)
                for b in (1, 2, 4, 8) for w in (0.0, 1.0, 2.0, 5.0, 10.0) for k in (1, 2, 4)]
    start = time.perf_counter()
    for p in policies:
        simulate(schedule, curve, p)
    elapsed = time.perf_counter() - start
    print(f"simulator speed: {len(policies)} policies x {len(schedule)} requests (measured "
          f"ServiceCurve) in {elapsed:.2f} s = {len(policies) / elapsed * 60:.0f} policies/min")


if __name__ == "__main__":
    main()
