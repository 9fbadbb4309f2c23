import pytest

from infertune.measure.coldstart import ColdStart, measure_cold_start, settle_index
from infertune.measure.hotspots import Hotspots, ort_node_totals, profile_ops, rank
from infertune.measure.padding import PaddingWaste, padding_waste
from infertune.models.text import TextPreprocess


def test_padding_waste_exact() -> None:
    waste = padding_waste([2, 4, 10, 10, 3], 2, max_length=8)
    # batches [2,4] -> 2x4, [8,8] -> 2x8, [3] -> 1x3 (10s truncated to 8)
    assert (waste.real_tokens, waste.padded_tokens, waste.batches) == (25, 27, 3)
    assert waste.truncated_inputs == 2
    assert waste.waste_fraction == pytest.approx(2 / 27)
    bucketed = padding_waste([2, 4], 2, max_length=64,
                             padded_length=TextPreprocess(max_length=64,
                                                          padding="bucket").padded_length)
    assert bucketed.padded_tokens == 32 and bucketed.real_tokens == 6
    assert PaddingWaste.from_dict(waste.to_dict()) == waste
    with pytest.raises(ValueError):
        padding_waste([1], 0, max_length=8)


def test_rank_shares() -> None:
    ops = rank({"MatMul": 300.0, "Add": 100.0, "Relu": 100.0}, {"MatMul": 3, "Add": 1,
                                                              "Relu": 2}, top=2)
    assert [(o.op, o.share_percent, o.count, o.total_ms) for o in ops] == [
        ("MatMul", 60.0, 3, 0.3), ("Add", 20.0, 1, 0.1)]


def test_ort_trace_parsing_skips_warmup_run() -> None:
    events = [
        {"cat": "Session", "name": "model_run", "ts": 0, "dur": 10},
        {"cat": "Node", "name": "mm_kernel_time", "ts": 2, "dur": 5, "args": {"op_name": "MatMul"}},
        {"cat": "Session", "name": "model_run", "ts": 20, "dur": 10},
        {"cat": "Node", "name": "mm_kernel_time", "ts": 22, "dur": 7,
         "args": {"op_name": "MatMul"}},
        {"cat": "Node", "name": "mm_fence_before", "ts": 22, "dur": 0,
         "args": {"op_name": "MatMul"}},
    ]
    assert ort_node_totals(events, skip_first_runs=1) == ({"MatMul": 7.0}, {"MatMul": 1})


def test_hotspots_onnxruntime(tiny_onnx) -> None:
    feeds = tiny_onnx.preprocess(tiny_onnx.sample_inputs(4))
    found = profile_ops(tiny_onnx, feeds, calls=3)
    assert found.tool == "onnxruntime"
    assert found.ops and all(o.count == 3 for o in found.ops)
    assert sum(o.share_percent for o in found.ops) == pytest.approx(100.0)
    assert Hotspots.from_dict(found.to_dict()) == found


def test_hotspots_torch(tiny_torch) -> None:
    feeds = tiny_torch.preprocess(tiny_torch.sample_inputs(4))
    found = profile_ops(tiny_torch, feeds, calls=2, top=20)
    assert found.tool == "torch.profiler"
    names = {o.op for o in found.ops}
    assert "aten::addmm" in names
    assert found.ops == sorted(found.ops, key=lambda o: o.total_ms, reverse=True)


def test_settle_index_rule() -> None:
    curve = [50.0, 30.0, 20.0, 12.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0]
    assert settle_index(curve) == (2, 10.0)  # median(20,12,10,10,10)=10
    assert settle_index([10.0] * 6) == (0, 10.0)
    assert settle_index([100, 100, 100, 100, 100, 100, 1, 1, 1, 1, 1, 1]) == (4, 1.0)
    with pytest.raises(ValueError):
        settle_index([])


def test_cold_start_in_fresh_process(tiny_onnx_path) -> None:
    cold = measure_cold_start(str(tiny_onnx_path), "onnxruntime", requests=12, curve_seconds=5)
    assert cold.import_s > 0 and cold.load_s > 0 and cold.first_inference_ms > 0
    assert len(cold.curve_ms) == 12
    assert cold.curve_ms[0] == cold.first_inference_ms
    assert ColdStart.from_dict(cold.to_dict()) == cold


def test_profiler_trace_lines_are_dropped_and_real_stderr_kept(tiny_torch, capfd) -> None:
    import os

    from infertune.measure.hotspots import _without_usdt_lines

    with _without_usdt_lines():
        os.write(2, b"USDT:2026 profiler_start\nwarning: a real one\n")
    feeds = tiny_torch.preprocess(tiny_torch.sample_inputs(2))
    profile_ops(tiny_torch, feeds, calls=2, top=3)  # torch.profiler itself prints USDT lines
    err = capfd.readouterr().err
    assert "warning: a real one" in err
    assert "USDT:" not in err
