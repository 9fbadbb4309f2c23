import math
from fractions import Fraction

import numpy as np
import pytest

from infertune.measure.histogram import HIGHEST_US, LatencyHistogram


def test_percentiles_match_numpy_within_hdr_precision() -> None:
    rng = np.random.default_rng(1)
    for values_ms in (rng.lognormal(np.log(5), 0.6, 20_000), rng.uniform(0.05, 900, 20_000),
                      rng.exponential(12, 20_000) + 0.01):
        hist = LatencyHistogram.from_ms(values_ms)
        assert hist.count == values_ms.size
        for p in (50, 90, 95, 99, 99.9):
            # the exact order statistic x_(ceil(q n)); numpy's float q*n can land one rank off
            expected = order_statistic(values_ms, p)
            # 3 significant figures = 0.1% relative, plus the 1 us integer rounding
            assert hist.percentile_ms(p) == pytest.approx(expected, rel=2e-3, abs=1e-3)


def test_merge_equals_recording_into_one() -> None:
    rng = np.random.default_rng(2)
    a_vals, b_vals = rng.lognormal(1, 1, 5000), rng.lognormal(2, 0.5, 3000)
    merged = LatencyHistogram.from_ms(a_vals).merge(LatencyHistogram.from_ms(b_vals))
    single = LatencyHistogram.from_ms(np.concatenate([a_vals, b_vals]))
    assert merged.equals(single)
    assert merged.count == 8000
    for p in (50, 99, 99.9):
        assert merged.percentile_ms(p) == single.percentile_ms(p)


def test_out_of_range_values_are_clamped_and_counted_not_dropped() -> None:
    hist = LatencyHistogram.from_ms([1.0, 2.0, 5e9, -0.5])
    assert hist.count == 4
    assert hist.clamped == 2
    assert hist.max_ms() >= HIGHEST_US / 1000 * 0.999
    assert hist.min_ms() == 0.0


def test_nan_is_refused() -> None:
    with pytest.raises(ValueError):
        LatencyHistogram().record_ms(float("nan"))


def test_encode_decode_and_dict_round_trip() -> None:
    hist = LatencyHistogram.from_ms([0.5, 1.5, 2.5, 1e12])
    text = hist.encode()
    assert text.startswith("hdr1:1:")
    back = LatencyHistogram.decode(text)
    assert back.equals(hist)
    again = LatencyHistogram.from_dict(hist.to_dict())
    assert again.to_dict() == hist.to_dict()
    with pytest.raises(ValueError):
        LatencyHistogram.decode("xyz:0:abc")


def order_statistic(values: np.ndarray, percentile: float) -> float:
    k = math.ceil(Fraction(str(percentile)) / 100 * values.size)
    return float(np.sort(values)[k - 1])


def test_order_statistic_helper_agrees_with_numpy_where_q_n_is_not_integral() -> None:
    x = np.random.default_rng(3).normal(size=999)
    assert order_statistic(x, 50) == np.percentile(x, 50, method="inverted_cdf")
