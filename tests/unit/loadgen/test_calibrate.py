"""The runtime calibration of the simulator's inputs (loadgen/calibrate.py)."""

from __future__ import annotations

import numpy as np
import pytest

from infertune.config import ServePolicy
from infertune.loadgen import LinearServiceTime, simulate
from infertune.loadgen.calibrate import CalibratedServiceTime, calibrate

ISOLATED = {1: [4.0, 4.0, 4.0], 2: [6.0, 6.0], 4: [10.0]}


def test_slowdown_is_the_batch_weighted_ratio_to_the_isolated_times() -> None:
    # sizes 1 and 2 ran 1.5x slower in the probe, three batches and one; size 8 was never
    # measured alone and is left out
    probe = {1: [6.0, 6.0, 6.0], 2: [9.0], 8: [50.0]}
    cal = calibrate(ISOLATED, probe, [(20.0, {"queue": 5.0, "inference": 6.0})], source="t")
    assert cal.slowdown == pytest.approx(1.5)
    assert cal.batches == 4
    assert cal.outside_ms == (9.0,)  # 20 - (5 + 6): time neither queued nor in the model


def test_outside_time_never_goes_negative_and_is_drawn_per_request() -> None:
    cal = calibrate(ISOLATED, {1: [4.0]}, [(3.0, {"inference": 4.0}), (10.0, {"queue": 2.0})],
                    source="t")
    assert cal.outside_ms == (0.0, 8.0)
    draws = cal.outside_draws(1000, seed=1)
    assert set(np.unique(draws)) == {0.0, 8.0} and 300 < (draws == 8.0).sum() < 700


def test_a_probe_that_measured_nothing_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no batch of a size"):
        calibrate(ISOLATED, {16: [1.0]}, [(1.0, {})], source="t")
    with pytest.raises(ValueError, match="answered no request"):
        calibrate(ISOLATED, {1: [4.0]}, [], source="t")


def test_the_simulator_adds_outside_time_to_latency_without_occupying_a_worker() -> None:
    arrivals = np.arange(0, 1.0, 0.1)  # one request every 100 ms, service 10 ms: no queueing
    policy = ServePolicy(max_batch_size=1, max_wait_ms=0, workers=1)
    plain = simulate(arrivals, LinearServiceTime(10.0), policy)
    outside = simulate(arrivals, LinearServiceTime(10.0), policy, outside_ms=np.full(10, 7.0))
    assert plain.p50_ms == pytest.approx(10.0)
    assert outside.p50_ms == pytest.approx(17.0)
    assert outside.utilisation == pytest.approx(plain.utilisation)
    slowed = simulate(arrivals, CalibratedServiceTime(LinearServiceTime(10.0), 1.5), policy)
    assert slowed.p50_ms == pytest.approx(15.0)
    with pytest.raises(ValueError, match="outside_ms has 3 entries"):
        simulate(arrivals, LinearServiceTime(10.0), policy, outside_ms=[1.0, 2.0, 3.0])
