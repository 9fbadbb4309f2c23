import pytest

from infertune.measure.curve import (
    CurvePoint,
    ServiceCurve,
    measure_curve,
    seq_lens_from_lengths,
    time_forward,
)


def _pt(b: int, s: int | None, ms: float) -> CurvePoint:
    return CurvePoint(b, s, ms, ms, ms, 5, b / (ms / 1000))


def test_batch_interpolation_and_extension() -> None:
    curve = ServiceCurve([_pt(1, None, 2.0), _pt(4, None, 5.0), _pt(8, None, 9.0)])
    assert curve.latency_ms(1) == 2.0
    assert curve.latency_ms(2) == pytest.approx(3.0)
    assert curve.latency_ms(6) == pytest.approx(7.0)
    assert curve.latency_ms(16) == pytest.approx(17.0)  # last slope (1 ms/item) extended
    assert curve.throughput_per_s(8) == pytest.approx(8 / 0.009)
    with pytest.raises(ValueError):
        curve.latency_ms(0)


def test_two_dimensional_interpolation() -> None:
    curve = ServiceCurve([_pt(1, 16, 2.0), _pt(8, 16, 10.0), _pt(1, 64, 6.0), _pt(8, 64, 30.0)],
                         typical_seq_len=16)
    assert curve.latency_ms(8) == 10.0  # seq_len None -> typical
    assert curve.latency_ms(1, 40) == pytest.approx(4.0)
    assert curve.latency_ms(8, 8) == 10.0  # below the shortest measured: floor
    assert curve.latency_ms(8, 112) == pytest.approx(50.0)  # extended
    assert ServiceCurve.from_dict(curve.to_dict()) == curve


def test_seq_lens_from_lengths() -> None:
    assert seq_lens_from_lengths(list(range(1, 101)), 64) == [50, 64]
    assert seq_lens_from_lengths([5, 5, 5], None) == [5]


def test_time_forward_respects_repeats_and_time_cap() -> None:
    now = [0.0]

    def clock() -> float:
        return now[0]

    def forward(_: dict) -> None:
        now[0] += 0.5

    assert len(time_forward(forward, {}, repeats=10, max_seconds=100, clock=clock)) == 10
    assert time_forward(forward, {}, repeats=10, max_seconds=1.0, clock=clock) == [500.0, 500.0]


def test_measure_curve_tensor_model(tiny_onnx) -> None:
    data = tiny_onnx.sample_inputs(5)
    curve = measure_curve(tiny_onnx, data, batch_sizes=(1, 4), repeats=3)
    assert [(p.batch_size, p.seq_len, p.samples) for p in curve.points] == [(1, None, 3),
                                                                            (4, None, 3)]
    assert curve.runtime == "onnxruntime"
    assert all(p.p50_ms > 0 for p in curve.points)


def test_measure_curve_text_model_and_budget(tiny_text, sentences) -> None:
    curve = measure_curve(tiny_text, sentences, batch_sizes=(1, 2), seq_lens=[4, 12], repeats=2)
    assert {(p.batch_size, p.seq_len) for p in curve.points} == {(1, 4), (2, 4), (1, 12), (2, 12)}
    assert curve.typical_seq_len == 4
    # a zero budget still measures the typical length's row, and lists the rest
    cut = measure_curve(tiny_text, sentences, batch_sizes=(1, 2), seq_lens=[4, 12], repeats=2,
                        budget_s=0.0)
    assert {(p.batch_size, p.seq_len) for p in cut.points} == {(1, 4), (2, 4)}
    assert cut.unmeasured == [(1, 12), (2, 12)]
    assert ServiceCurve.from_dict(cut.to_dict()) == cut
