import threading

import pytest

from infertune.measure.utilisation import Sample, Utilisation, UtilisationSampler, psutil_sampler


def test_sampler_collects_and_stops_cleanly_with_injected_sampling() -> None:
    readings = iter([Sample(50, 20, 0.0, 100), Sample(150, 80, 2.0, 300),
                     Sample(100, 50, 1.0, 200)] + [Sample(100, 50, 1.0, 200)] * 1000)
    enough = threading.Event()
    taken: list[int] = []

    def sample() -> Sample:
        taken.append(1)
        if len(taken) >= 3:
            enough.set()
        return next(readings)

    sampler = UtilisationSampler(interval_s=0.001, sample_fn=sample).start()
    assert enough.wait(5.0)
    util = sampler.stop()
    assert sampler._thread is None
    n = util.samples
    assert n == len(taken) >= 3
    assert util.process_cpu_max == 150 and util.peak_rss_mb == 300 and util.steal_max == 2.0
    assert util.gpu_util_mean is None
    assert Utilisation.from_dict(util.to_dict()) == util
    with pytest.raises(RuntimeError):
        sampler.stop()


def test_summary_values_are_exact() -> None:
    samples = [Sample(100, 50, 0.0, 100, gpu_util=10, gpu_memory_mb=500),
               Sample(200, 100, 4.0, 400, gpu_util=30, gpu_memory_mb=700)]
    util = Utilisation.from_samples(samples, 0.2, logical_cores=4)
    assert util.process_cpu_mean == 150 and util.system_cpu_mean == 75
    assert util.steal_mean == 2.0 and util.peak_rss_mb == 400
    assert util.gpu_util_mean == 20 and util.gpu_memory_peak_mb == 700
    # 75% of 4 cores busy = 3 cores, this process 1.5 cores -> 1.5 cores of other work
    assert util.other_cores == pytest.approx(1.5)
    with pytest.raises(ValueError):
        Utilisation.from_samples([], 0.2)


def test_real_psutil_reading_is_sane() -> None:
    reading = psutil_sampler()()
    assert reading.rss_mb > 10
    assert 0 <= reading.system_cpu <= 100
    assert reading.steal >= 0


def test_context_manager_takes_a_final_sample() -> None:
    with UtilisationSampler(interval_s=60, sample_fn=lambda: Sample(1, 1, 0, 1)) as sampler:
        pass
    assert sampler.result().samples == 1
