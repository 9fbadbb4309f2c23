"""Every measure artifact round-trips through JSON by the one serialisation (Serial), and the
main ones write exactly the dict the hand-written to_dict wrote before (the OLD_* literals were
captured by running that code on these instances), so files written then still load."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infertune.measure.coldstart import ColdStart
from infertune.measure.compare import ComparisonResult, ComparisonStats, RatioEstimate
from infertune.measure.curve import CurvePoint, ServiceCurve
from infertune.measure.diagnosis import RoundStat
from infertune.measure.hotspots import Hotspot, Hotspots
from infertune.measure.padding import PaddingWaste
from infertune.measure.profile import Profile, ProfileSettings
from infertune.measure.stage_timers import StageReport
from infertune.measure.summary import Estimate, LatencySummary
from infertune.measure.tail_interval import TailInterval
from infertune.measure.utilisation import Utilisation

SUMMARY = LatencySummary(
    count=200, mean=Estimate(10.5, 10.0, 11.0), min=3.0, max=40.0,
    percentiles={"p50": Estimate(9.5, 9.0, 10.0), "p99": Estimate(35.0, 30.0, 40.0),
                 "p99_9": Estimate(40.0)},
    tail_note="p99 from 200 samples: 2 in the top 1% (too few for a stable tail; collect more)",
    clamped=1)
FORWARD = LatencySummary(count=200, mean=Estimate(8.0, unit="ms"), min=2.5, max=30.0,
                         percentiles={"p50": Estimate(7.5, 7.0, 8.0)}, unit="ms")
STATS = ComparisonStats(
    n_a=160, n_b=160, p50=RatioEstimate(50.0, 0.9, 0.85, 0.95, "B is faster", True, 0.99),
    p95=RatioEstimate(95.0, 1.01, 0.97, 1.04, "no significant difference", False, 0.99),
    threshold=0.02, seed=3, method="paired block bootstrap")
COMPARISON = ComparisonResult(
    a="torch", b="onnx", stats=STATS, a_summary=SUMMARY, b_summary=FORWARD, trials=8,
    block_size=20, seconds=12.5, budget_s=60.0, stopped="conclusive", order=["AB", "BA"],
    block_warmup=5, where="each side in its own process", pids=[101, 102])
STAGES = StageReport(
    summaries={"e2e": SUMMARY, "forward": FORWARD},
    share_p50={"preprocess": 10.0, "forward": 80.0, "postprocess": 5.0, "overhead": 5.0},
    share_p99={"preprocess": 5.0, "forward": 60.0, "postprocess": 30.0, "overhead": 5.0},
    tail_requests=2, typical_e2e_ms=9.5, tail_e2e_ms=38.0)
HOTSPOTS = Hotspots("onnxruntime", 3, [Hotspot("MatMul", 12.5, 36, 62.5),
                                       Hotspot("Add", 2.0, 12, 10.0)])
UTILISATION = Utilisation(
    samples=50, interval_s=0.2, process_cpu_mean=95.0, process_cpu_max=180.0,
    system_cpu_mean=60.0, system_cpu_max=90.0, steal_mean=0.5, steal_max=2.0,
    peak_rss_mb=512.0, logical_cores=4, gpu_util_mean=40.0, gpu_memory_peak_mb=2048.0,
    gpu_process_memory_peak_mb=1024.0)
COLD = ColdStart(import_s=1.5, load_s=0.75, first_inference_ms=120.0, settled_after=3,
                 steady_ms=9.0, curve_ms=[120.0, 20.0, 10.0, 9.0])
PADDING = PaddingWaste(batch_size=8, batches=4, real_tokens=300, padded_tokens=400,
                       padding="longest", truncated_inputs=1)
CURVE = ServiceCurve(
    points=[CurvePoint(1, 16, 5.0, 6.0, 5.25, 10, 200.0),
            CurvePoint(8, 16, 20.0, 24.0, 21.0, 10, 400.0)],
    typical_seq_len=16, runtime="onnxruntime", note="forward only, 2 repeats",
    unmeasured=[(8, 64), (16, None)])
SETTINGS = ProfileSettings(batch_sizes=(1, 4), requests=200, rounds=2, stage_seconds=5.0,
                           min_round_requests=20, warmup=3, curve_repeats=4, curve_seconds=6.0,
                           cold_start_seconds=2.0, typical_batch=4, hotspot_calls=1,
                           hotspot_top=5, cold_start=False, cold_start_requests=10, seed=7)
MODEL = {"id": "tiny", "version": "0123456789ab", "kind": "text", "task": "embedding",
         "runtime": "onnxruntime", "precision": "fp32", "input_names": ["input_ids"],
         "source": "/models/tiny.onnx", "max_length": 128, "max_position": 512,
         "tokenizer_dir": None}
PROFILE = Profile(
    model=MODEL, data_source="bundled", data_count=64, settings=SETTINGS, stages=STAGES,
    rounds=[RoundStat(0, 100, 9.5, 30.0), RoundStat(1, 100, 9.75, 31.0)], curve=CURVE,
    utilisation=UTILISATION, cold_start=COLD, hotspots=HOTSPOTS, padding=PADDING,
    diagnosis=["forward dominates p50 (80% of a typical 9.50 ms request)."],
    skipped={"curve_points": "2 of the grid's points not measured"},
    step_seconds={"stages": 3.5, "curve": 6.0}, hardware={"cpu_model": "Fake Xeon"},
    seconds=42.0)
BARE_PROFILE = Profile(
    model=MODEL, data_source="", data_count=8, settings=ProfileSettings(), stages=STAGES,
    rounds=[], curve=CURVE, utilisation=UTILISATION, cold_start=None, hotspots=None,
    padding=None, diagnosis=[])

CASES: list[Any] = [
    Estimate(12.5, 11.0, 14.25, "us"), SUMMARY, FORWARD, STATS.p50, STATS, COMPARISON, STAGES,
    HOTSPOTS.ops[0], HOTSPOTS,
    TailInterval(q=0.99, value=35.0, low=30.0, high=None, samples=200, blocks=12, block_s=2.0),
    UTILISATION, RoundStat(2, 50, 9.0, 12.0), COLD,
    ColdStart(2.0, 1.0, 300.0, None, 11.0, [300.0, 40.0], rule="never settled"), PADDING,
    CURVE.points[0], CURVE, ServiceCurve([CurvePoint(4, None, 3.0, 3.5, 3.1, 5, 1333.0)]),
    SETTINGS, PROFILE, BARE_PROFILE,
]


@pytest.mark.parametrize("obj", CASES, ids=lambda o: type(o).__name__)
def test_round_trip_through_json(obj: Any) -> None:
    assert type(obj).from_dict(json.loads(json.dumps(obj.to_dict()))) == obj


OLD_SUMMARY = {
    "count": 200, "unit": "ms", "mean": {"value": 10.5, "low": 10.0, "high": 11.0, "unit": "ms"},
    "min": 3.0, "max": 40.0,
    "percentiles": {"p50": {"value": 9.5, "low": 9.0, "high": 10.0, "unit": "ms"},
                    "p99": {"value": 35.0, "low": 30.0, "high": 40.0, "unit": "ms"},
                    "p99_9": {"value": 40.0, "low": None, "high": None, "unit": "ms"}},
    "tail_note": "p99 from 200 samples: 2 in the top 1% (too few for a stable tail; collect "
                 "more)",
    "clamped": 1}
OLD_FORWARD = {
    "count": 200, "unit": "ms", "mean": {"value": 8.0, "low": None, "high": None, "unit": "ms"},
    "min": 2.5, "max": 30.0,
    "percentiles": {"p50": {"value": 7.5, "low": 7.0, "high": 8.0, "unit": "ms"}},
    "tail_note": "", "clamped": 0}
OLD_STATS = {
    "n_a": 160, "n_b": 160,
    "p50": {"percentile": 50.0, "ratio": 0.9, "low": 0.85, "high": 0.95,
            "verdict": "B is faster", "conclusive": True, "confidence": 0.99},
    "p95": {"percentile": 95.0, "ratio": 1.01, "low": 0.97, "high": 1.04,
            "verdict": "no significant difference", "conclusive": False, "confidence": 0.99},
    "threshold": 0.02, "seed": 3, "method": "paired block bootstrap",
    "verdict": "B is faster", "conclusive": True}
OLD_COMPARISON = {
    "schema": "infertune.compare/v1", "a": "torch", "b": "onnx", "verdict": "B is faster",
    "stats": OLD_STATS, "a_summary": OLD_SUMMARY, "b_summary": OLD_FORWARD, "trials": 8,
    "block_size": 20, "seconds": 12.5, "budget_s": 60.0, "stopped": "conclusive",
    "order": ["AB", "BA"], "block_warmup": 5, "where": "each side in its own process",
    "pids": [101, 102]}
OLD_STAGES = {
    "summaries": {"e2e": OLD_SUMMARY, "forward": OLD_FORWARD},
    "share_p50_percent": {"preprocess": 10.0, "forward": 80.0, "postprocess": 5.0,
                          "overhead": 5.0},
    "share_p99_percent": {"preprocess": 5.0, "forward": 60.0, "postprocess": 30.0,
                          "overhead": 5.0},
    "share_definition": "stage mean / e2e mean over requests with e2e in [p40, p60] (p50) or "
                        "the slowest ceil(1%) (p99)",
    "tail_requests": 2, "typical_e2e_ms": 9.5, "tail_e2e_ms": 38.0,
    "dominant_p50": "forward", "dominant_p99": "forward"}
OLD_CURVE = {
    "points": [{"batch_size": 1, "seq_len": 16, "p50_ms": 5.0, "p95_ms": 6.0, "mean_ms": 5.25,
                "samples": 10, "throughput_per_s": 200.0},
               {"batch_size": 8, "seq_len": 16, "p50_ms": 20.0, "p95_ms": 24.0,
                "mean_ms": 21.0, "samples": 10, "throughput_per_s": 400.0}],
    "typical_seq_len": 16, "runtime": "onnxruntime", "note": "forward only, 2 repeats",
    "unit": "ms", "unmeasured": [[8, 64], [16, None]]}
OLD_UTILISATION = {
    "samples": 50, "interval_s": 0.2, "process_cpu_mean": 95.0, "process_cpu_max": 180.0,
    "system_cpu_mean": 60.0, "system_cpu_max": 90.0, "steal_mean": 0.5, "steal_max": 2.0,
    "peak_rss_mb": 512.0, "logical_cores": 4, "gpu_util_mean": 40.0,
    "gpu_memory_peak_mb": 2048.0, "gpu_process_util_mean": None,
    "gpu_process_memory_peak_mb": 1024.0,
    "unit_note": "process_cpu: % of one core; system_cpu and steal: % of all cores; rss in MiB",
    "other_cores": 1.45}  # 60% of 4 cores busy, 95% of one core ours: 2.4 - 0.95
OLD_COLD = {
    "import_s": 1.5, "load_s": 0.75, "first_inference_ms": 120.0, "settled_after": 3,
    "steady_ms": 9.0, "curve_ms": [120.0, 20.0, 10.0, 9.0],
    "rule": "settled at the first request i where median(latency[i:i+5]) <= 1.10 x median of "
            "the curve's second half",
    "total_s": 2.37}
OLD_HOTSPOTS = {
    "tool": "onnxruntime", "forward_calls": 3,
    "ops": [{"op": "MatMul", "total_ms": 12.5, "count": 36, "share_percent": 62.5},
            {"op": "Add", "total_ms": 2.0, "count": 12, "share_percent": 10.0}]}
OLD_PADDING = {"batch_size": 8, "batches": 4, "real_tokens": 300, "padded_tokens": 400,
               "padding": "longest", "truncated_inputs": 1, "waste_percent": 25.0}
OLD_SETTINGS = {
    "batch_sizes": [1, 4], "requests": 200, "rounds": 2, "stage_seconds": 5.0,
    "min_round_requests": 20, "warmup": 3, "curve_repeats": 4, "curve_seconds": 6.0,
    "cold_start_seconds": 2.0, "typical_batch": 4, "hotspot_calls": 1, "hotspot_top": 5,
    "cold_start": False, "cold_start_requests": 10, "seed": 7}
OLD_PROFILE = {
    "schema": "infertune.profile/v1", "model": MODEL, "data_source": "bundled",
    "data_count": 64, "settings": OLD_SETTINGS, "stages": OLD_STAGES,
    "rounds": [{"index": 0, "count": 100, "p50_ms": 9.5, "p99_ms": 30.0},
               {"index": 1, "count": 100, "p50_ms": 9.75, "p99_ms": 31.0}],
    "curve": OLD_CURVE, "utilisation": OLD_UTILISATION, "cold_start": OLD_COLD,
    "hotspots": OLD_HOTSPOTS, "padding": OLD_PADDING,
    "diagnosis": ["forward dominates p50 (80% of a typical 9.50 ms request)."],
    "skipped": {"curve_points": "2 of the grid's points not measured"},
    "step_seconds": {"stages": 3.5, "curve": 6.0}, "hardware": {"cpu_model": "Fake Xeon"},
    "seconds": 42.0}

OLD: list[tuple[Any, dict[str, Any]]] = [
    (SUMMARY, OLD_SUMMARY), (STATS, OLD_STATS), (COMPARISON, OLD_COMPARISON),
    (STAGES, OLD_STAGES), (CURVE, OLD_CURVE), (COLD, OLD_COLD), (PADDING, OLD_PADDING),
    (UTILISATION, OLD_UTILISATION), (HOTSPOTS, OLD_HOTSPOTS), (SETTINGS, OLD_SETTINGS),
    (PROFILE, OLD_PROFILE),
]


@pytest.mark.parametrize(("obj", "old"), OLD, ids=lambda o: type(o).__name__)
def test_writes_and_reads_what_the_hand_written_code_wrote(obj: Any, old: dict[str, Any]
                                                           ) -> None:
    assert obj.to_dict() == old
    assert type(obj).from_dict(old) == obj
