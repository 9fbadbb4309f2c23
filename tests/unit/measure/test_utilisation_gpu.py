"""Per-process GPU readings through a stand-in for pynvml: this process's own memory and SM
utilisation where NVML lists it, None where it does not (another PID namespace, an old GPU),
and the summary over samples."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from infertune.measure.utilisation import Sample, Utilisation, process_gpu_reading


class FakeNvml:
    class NVMLError(Exception):
        pass

    def __init__(self, processes: list[Any], samples: list[Any] | None,
                 memory_error: bool = False) -> None:
        self.processes, self.samples, self.memory_error = processes, samples, memory_error
        self.asked_since: list[int] = []

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:  # noqa: N802
        if self.memory_error:
            raise self.NVMLError("not supported")
        return self.processes

    def nvmlDeviceGetProcessUtilization(self, handle: Any, since: int) -> list[Any]:  # noqa: N802
        self.asked_since.append(since)
        if self.samples is None:
            raise self.NVMLError("not found")
        return self.samples


def proc(pid: int, used: int | None) -> Any:
    return SimpleNamespace(pid=pid, usedGpuMemory=used)


def util(pid: int, sm: int, stamp: int) -> Any:
    return SimpleNamespace(pid=pid, smUtil=sm, timeStamp=stamp)


def test_this_process_s_memory_and_sm_share_are_read_by_pid() -> None:
    nvml = FakeNvml([proc(7, 3 * 2**20), proc(42, 512 * 2**20)],
                    [util(42, 30, 100), util(7, 90, 150), util(42, 55, 200)])
    seen = {"since_us": 0}
    assert process_gpu_reading(nvml, "h", 42, seen) == (55.0, 512.0)
    assert seen == {"since_us": 200}  # the next call asks only for newer samples
    process_gpu_reading(nvml, "h", 42, seen)
    assert nvml.asked_since == [0, 200]


def test_readings_nvml_does_not_give_for_this_process_stay_none() -> None:
    # another PID namespace: NVML lists host PIDs only; memory None: not reported
    assert process_gpu_reading(FakeNvml([proc(9, 100)], [util(9, 50, 1)]), "h", 42,
                               {"since_us": 0}) == (None, None)
    assert process_gpu_reading(FakeNvml([proc(42, None)], None), "h", 42,
                               {"since_us": 5}) == (None, None)
    assert process_gpu_reading(FakeNvml([], [], memory_error=True), "h", 42,
                               {"since_us": 0}) == (None, None)


def test_the_summary_carries_the_process_s_own_gpu_figures() -> None:
    samples = [Sample(100, 50, 0.0, 100, gpu_util=40, gpu_memory_mb=900,
                      gpu_process_util=30, gpu_process_memory_mb=600),
               Sample(100, 50, 0.0, 100, gpu_util=60, gpu_memory_mb=1000,
                      gpu_process_util=None, gpu_process_memory_mb=700)]
    found = Utilisation.from_samples(samples, 0.2, logical_cores=2)
    assert found.gpu_util_mean == 50 and found.gpu_memory_peak_mb == 1000
    assert found.gpu_process_util_mean == 30 and found.gpu_process_memory_peak_mb == 700
    assert Utilisation.from_dict(found.to_dict()) == found
    cpu_only = Utilisation.from_samples([Sample(1, 1, 0, 1)], 0.2, logical_cores=2)
    assert cpu_only.gpu_process_util_mean is None and cpu_only.gpu_process_memory_peak_mb is None
