"""Background utilisation sampler: process and system CPU %, peak RSS, CPU steal (the
noisy-neighbour signal) and, when an NVIDIA GPU and driver are present, GPU utilisation and
memory: the device's, and this process's own where NVML reports it (per-process memory and
SM utilisation; inside a container with its own PID namespace NVML lists host PIDs, so the
per-process readings stay None rather than guess). A daemon thread samples every
``interval_s`` until ``stop()``; sampling one point costs a few syscalls, so at the default
0.2 s it takes well under 1% of a core.

The sampling function and the wait are injected, so tests drive it without real time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil
import pynvml

from infertune.serial import Serial


@dataclass
class Sample:
    process_cpu: float  # percent of one core (can exceed 100 with threads)
    system_cpu: float  # percent of all cores
    steal: float  # percent of CPU time stolen by the hypervisor (0 when not reported)
    rss_mb: float
    gpu_util: float | None = None
    gpu_memory_mb: float | None = None
    gpu_process_util: float | None = None  # this process's SM %, when NVML reports it
    gpu_process_memory_mb: float | None = None


SampleFn = Callable[[], Sample]


def psutil_sampler(process: psutil.Process | None = None) -> SampleFn:
    """A sampling function over psutil (and pynvml when a GPU is visible)."""
    proc = process or psutil.Process()
    # psutil divides CPU time by the wall time between calls; when this thread is itself
    # delayed on a busy machine the ratio can exceed what the cores allow, so cap it there.
    ceiling = 100.0 * (psutil.cpu_count() or 1)
    proc.cpu_percent(None)  # the first call primes the counters and returns 0
    psutil.cpu_percent(None)
    psutil.cpu_times_percent(None)
    gpu = _nvml_handle()
    # NVML's per-process utilisation returns samples newer than a timestamp (microseconds)
    seen = {"since_us": 0}

    def sample() -> Sample:
        times = psutil.cpu_times_percent(None)
        util, mem = _gpu_reading(gpu) if gpu is not None else (None, None)
        own = (process_gpu_reading(pynvml, gpu, proc.pid, seen) if gpu is not None
               else (None, None))
        return Sample(process_cpu=min(proc.cpu_percent(None), ceiling),
                      system_cpu=psutil.cpu_percent(None),
                      steal=float(getattr(times, "steal", 0.0)),
                      rss_mb=proc.memory_info().rss / 2**20, gpu_util=util, gpu_memory_mb=mem,
                      gpu_process_util=own[0], gpu_process_memory_mb=own[1])

    return sample


def _nvml_handle() -> Any:
    try:
        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() == 0:
            return None
        return pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:  # no driver / no GPU: pynvml raises NVMLError subclasses
        return None


def _gpu_reading(handle: Any) -> tuple[float | None, float | None]:
    try:
        util = pynvml.nvmlDeviceGetUtilizationRates(handle)
        mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return float(util.gpu), float(mem.used) / 2**20
    except pynvml.NVMLError:
        return None, None


def process_gpu_reading(nvml: Any, handle: Any, pid: int, seen: dict[str, int]
                        ) -> tuple[float | None, float | None]:
    """(SM utilisation %, memory MiB) of process ``pid`` on the device, each None where NVML
    does not report it for this process. ``nvml`` is the pynvml module (injected in tests);
    ``seen["since_us"]`` keeps the newest utilisation sample's timestamp between calls."""
    memory: float | None = None
    try:
        for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
            used = getattr(proc, "usedGpuMemory", None)
            if proc.pid == pid and used is not None:  # None: not reported (e.g. on Windows WDDM)
                memory = float(used) / 2**20
    except nvml.NVMLError:
        pass
    util: float | None = None
    try:
        found = [s for s in nvml.nvmlDeviceGetProcessUtilization(handle, seen["since_us"])
                 if s.pid == pid]
        if found:
            util = float(max(s.smUtil for s in found))
            seen["since_us"] = max(int(s.timeStamp) for s in found)
    except nvml.NVMLError:  # NotFound: no sample since the last call; NotSupported: old GPUs
        pass
    return util, memory


@dataclass
class Utilisation(Serial):
    DERIVED = ("other_cores",)

    samples: int
    interval_s: float
    process_cpu_mean: float
    process_cpu_max: float
    system_cpu_mean: float
    system_cpu_max: float
    steal_mean: float
    steal_max: float
    peak_rss_mb: float
    logical_cores: int = 1
    gpu_util_mean: float | None = None
    gpu_memory_peak_mb: float | None = None
    gpu_process_util_mean: float | None = None  # this process's own, where NVML reports it
    gpu_process_memory_peak_mb: float | None = None
    unit_note: str = ("process_cpu: % of one core; system_cpu and steal: % of all cores; "
                      "rss in MiB")

    @property
    def other_cores(self) -> float:
        """Cores busy with other processes on average (system busy minus this process): the
        noisy-neighbour load this measurement shared the machine with."""
        return max(self.system_cpu_mean / 100.0 * self.logical_cores
                   - self.process_cpu_mean / 100.0, 0.0)

    @classmethod
    def from_samples(cls, samples: list[Sample], interval_s: float,
                     logical_cores: int | None = None) -> Utilisation:
        if not samples:
            raise ValueError("the sampler took no samples; run it for at least one interval")

        def col(name: str) -> list[float]:
            return [getattr(s, name) for s in samples]

        gpu = [s.gpu_util for s in samples if s.gpu_util is not None]
        gmem = [s.gpu_memory_mb for s in samples if s.gpu_memory_mb is not None]
        own = [s.gpu_process_util for s in samples if s.gpu_process_util is not None]
        omem = [s.gpu_process_memory_mb for s in samples if s.gpu_process_memory_mb is not None]
        return cls(samples=len(samples), interval_s=interval_s,
                   process_cpu_mean=_mean(col("process_cpu")),
                   process_cpu_max=max(col("process_cpu")),
                   system_cpu_mean=_mean(col("system_cpu")), system_cpu_max=max(col("system_cpu")),
                   steal_mean=_mean(col("steal")), steal_max=max(col("steal")),
                   peak_rss_mb=max(col("rss_mb")),
                   logical_cores=logical_cores or psutil.cpu_count() or 1,
                   gpu_util_mean=_mean(gpu) if gpu else None,
                   gpu_memory_peak_mb=max(gmem) if gmem else None,
                   gpu_process_util_mean=_mean(own) if own else None,
                   gpu_process_memory_peak_mb=max(omem) if omem else None)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


@dataclass
class UtilisationSampler:
    """Use as a context manager, or start()/stop(); ``result()`` summarises the samples."""

    interval_s: float = 0.2
    sample_fn: SampleFn | None = None
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> UtilisationSampler:
        if self._thread is not None:
            raise RuntimeError("sampler already started")
        fn = self.sample_fn or psutil_sampler()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, args=(fn,), daemon=True,
                                        name="infertune-utilisation")
        self._thread.start()
        return self

    def _loop(self, fn: SampleFn) -> None:
        # wait() first: psutil's percentages are "since the previous call", so the first
        # reading must come one interval after priming.
        while not self._stop.wait(self.interval_s):
            self.samples.append(fn())
        self.samples.append(fn())  # one final reading covers the last partial interval

    def stop(self) -> Utilisation:
        if self._thread is None:
            raise RuntimeError("sampler was not started")
        self._stop.set()
        self._thread.join()
        self._thread = None
        return self.result()

    def result(self) -> Utilisation:
        return Utilisation.from_samples(self.samples, self.interval_s)

    def __enter__(self) -> UtilisationSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self.stop()
