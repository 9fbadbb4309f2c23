"""Arrival schedules: exact shapes where the value is known, statistics within tolerances
derived from theory (delta-method standard errors of the gap SCV), and bad input."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from infertune.errors import ConfigError, DataError
from infertune.loadgen.schedules import (
    SHAPES,
    ScheduleSpec,
    ScheduleStats,
    build_schedule,
    parse_duration,
    read_trace,
    schedule_stats,
)


def scv_standard_error(shape_k: float, n: int) -> float:
    """Delta-method s.e. of the sample squared CV of n gamma(k) gaps (k = 1: exponential).

    With mean 1: m2 = 1/k, m3 = 2/k^2, m4 = 3/k^2 + 6/k^3, c2 = m2, and
    Var(c2_hat) ~ [(m4 - m2^2) + 4 c2^2 m2 - 4 c2 m3] / n."""
    m2, m3, m4 = 1 / shape_k, 2 / shape_k**2, 3 / shape_k**2 + 6 / shape_k**3
    c2 = m2
    return math.sqrt(((m4 - m2**2) + 4 * c2**2 * m2 - 4 * c2 * m3) / n)


def test_constant_is_exact() -> None:
    s = build_schedule(ScheduleSpec(shape="constant", rate=100, duration_s=6))
    assert len(s) == 600
    assert s.offsets_s[0] == 0.0
    assert s.offsets_s[-1] == pytest.approx(5.99)
    st = s.stats()
    assert st.mean_rate == pytest.approx(100.0)
    assert st.peak_1s_rate == 100
    assert st.gap_scv == pytest.approx(0.0, abs=1e-12)


def test_poisson_scv_is_one() -> None:
    s = build_schedule(ScheduleSpec(shape="poisson", rate=200, duration_s=100, seed=3))
    st = s.stats()
    n = st.count - 1
    assert abs(st.gap_scv - 1.0) < 5 * scv_standard_error(1.0, n)
    # count ~ Poisson(20000): within 5 standard deviations
    assert abs(st.count - 20000) < 5 * math.sqrt(20000)


def test_gamma_quarter_burstiness_has_scv_four() -> None:
    s = build_schedule(ScheduleSpec(shape="gamma", rate=1000, duration_s=100, burstiness=0.25,
                                    seed=1))
    st = s.stats()
    tol = 5 * scv_standard_error(0.25, st.count - 1)
    assert tol < 0.25  # the test is sharp enough to tell 4 from 3 or 5
    assert abs(st.gap_scv - 4.0) < tol
    assert st.mean_rate == pytest.approx(1000, rel=0.05)


def test_onoff_peak_one_second_rate_near_peak() -> None:
    spec = ScheduleSpec(shape="onoff", rate=10, peak_rate=200, burst_s=3, gap_s=5,
                        duration_s=120, seed=2)
    st = build_schedule(spec).stats()
    # The busiest 1-s window is a burst window: Poisson(200 [+10 at an edge]) counts, the
    # maximum over the ~45 s of bursts; 6 standard deviations above, 0.8 x peak below.
    assert 0.8 * 200 <= st.peak_1s_rate <= 210 + 6 * math.sqrt(210)
    assert st.gap_scv > 1.5  # modulated traffic is burstier than Poisson


def test_ramp_rises_linearly() -> None:
    s = build_schedule(ScheduleSpec(shape="ramp", rate=10, peak_rate=110, duration_s=10))
    # total = integral of 10 + 10 t over 10 s = 100 + 500 = 600 requests, evenly in intensity
    assert len(s) == 600
    first, last = np.diff(s.offsets_s[:2])[0], np.diff(s.offsets_s[-2:])[0]
    assert 1 / first == pytest.approx(10, rel=0.1)
    assert 1 / last == pytest.approx(110, rel=0.05)


def test_seeded_schedules_repeat() -> None:
    a = build_schedule(ScheduleSpec(shape="gamma", rate=50, duration_s=5, burstiness=0.5, seed=7))
    b = build_schedule(ScheduleSpec(shape="gamma", rate=50, duration_s=5, burstiness=0.5, seed=7))
    c = build_schedule(ScheduleSpec(shape="gamma", rate=50, duration_s=5, burstiness=0.5, seed=8))
    assert np.array_equal(a.offsets_s, b.offsets_s)
    assert not np.array_equal(a.offsets_s, c.offsets_s)


def test_unknown_shape_names_known_shapes() -> None:
    with pytest.raises(ConfigError, match="unknown traffic shape 'square'.*constant"):
        build_schedule(ScheduleSpec(shape="square", rate=5))
    assert set(SHAPES) == {"constant", "poisson", "gamma", "onoff", "ramp", "trace"}


@pytest.mark.parametrize("rate", [0.0, -1.0, float("nan")])
def test_rate_must_be_positive(rate: float) -> None:
    with pytest.raises(ConfigError, match="rate must be > 0"):
        ScheduleSpec(shape="poisson", rate=rate)


def test_onoff_and_ramp_need_peak_rate() -> None:
    with pytest.raises(ConfigError, match="--peak-rate"):
        build_schedule(ScheduleSpec(shape="onoff", rate=5))
    with pytest.raises(ConfigError, match="--peak-rate"):
        build_schedule(ScheduleSpec(shape="ramp", rate=5))


def test_trace_csv_timestamps_and_scale(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("timestamp,user\n100.0,a\n100.5,b\n101.0,c\n103.0,d\n")
    assert read_trace(path).tolist() == [0.0, 0.5, 1.0, 3.0]
    s = build_schedule(ScheduleSpec(shape="trace", trace=path, trace_scale=2.0, duration_s=None))
    assert s.offsets_s.tolist() == [0.0, 0.25, 0.5, 1.5]
    assert s.duration_s == pytest.approx(2.0)  # 3 gaps over 1.5 s: 2 req/s, window 4 / 2
    assert s.stats().mean_rate == pytest.approx(2.0)
    cut = build_schedule(ScheduleSpec(shape="trace", trace=path, duration_s=1.0))
    assert cut.offsets_s.tolist() == [0.0, 0.5] and cut.duration_s == 1.0


def test_trace_jsonl_gaps_and_bare_numbers(tmp_path: Path) -> None:
    gaps = tmp_path / "g.jsonl"
    gaps.write_text('{"gap": 0}\n{"gap": 0.1}\n\n{"gap": 0.4}\n')
    assert read_trace(gaps).tolist() == pytest.approx([0.0, 0.1, 0.5])
    bare = tmp_path / "b.jsonl"
    bare.write_text("5\n6\n6\n")  # equal timestamps are simultaneous requests: allowed
    assert read_trace(bare).tolist() == [0.0, 1.0, 1.0]


def test_trace_non_monotonic_is_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("ts\n1.0\n2.0\n1.5\n")
    with pytest.raises(DataError) as info:
        build_schedule(ScheduleSpec(shape="trace", trace=path, duration_s=None))
    message = str(info.value)
    assert "backwards at entry 3" in message and "sort the trace" in message
    assert "\n" not in message


def test_trace_bad_files(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found"):
        read_trace(tmp_path / "missing.csv")
    neg = tmp_path / "neg.jsonl"
    neg.write_text('{"gap": 0.1}\n{"gap": -0.2}\n')
    with pytest.raises(DataError, match="negative"):
        read_trace(neg)
    nocol = tmp_path / "nocol.csv"
    nocol.write_text("user,size\na,1\n")
    with pytest.raises(DataError, match="no column named"):
        read_trace(nocol)
    with pytest.raises(ConfigError, match="--trace"):
        build_schedule(ScheduleSpec(shape="trace", duration_s=None))


def test_stats_round_trip_and_sliding_peak() -> None:
    st = schedule_stats(np.array([0.0, 0.6, 0.9, 1.2, 1.5, 3.0]), 4.0)
    # window [0.6, 1.6) holds 0.6, 0.9, 1.2, 1.5
    assert st.count == 6 and st.peak_1s_rate == 4 and st.mean_rate == 1.5
    assert ScheduleStats.from_dict(st.to_dict()) == st
    spec = ScheduleSpec(shape="trace", trace=Path("x.csv"), duration_s=None)
    assert ScheduleSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize("text,seconds", [("60s", 60), ("2m", 120), ("500ms", 0.5),
                                          ("1.5h", 5400), ("7", 7)])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["soon", "0s", "-3m"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match="30s"):
        parse_duration(text)
