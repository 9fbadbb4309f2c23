"""One instance of each artifact class in optimize/, with representative (non-default) values,
for the round-trip tests (test_optimize_round_trip.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infertune.config import Scenario
from infertune.measure.curve import CurvePoint, ServiceCurve
from infertune.measure.tail_interval import TailInterval
from infertune.models.variant import Manifest
from infertune.optimize.findings import BuiltVariant, LoadCurve, by_stage
from infertune.optimize.passes.registry import EngineVerdict
from infertune.optimize.passes.variant_files import VariantResult
from infertune.optimize.record import RunRecord
from infertune.optimize.search.costs import BudgetChoice, BudgetEstimate, CostFacts
from infertune.optimize.search.ordering import PlannedPass, SearchPlan
from infertune.optimize.search.screening import BatchPoint, BatchVerdict, ScreenCurve, ServedScreen
from infertune.optimize.search.timing import (
    ONE_PROCESS,
    OWN_PROCESSES,
    Candidate,
    Skipped,
    Timing,
)
from infertune.optimize.served.cascade_eval import CascadePoint, CascadeResult, RightSizing
from infertune.optimize.served.input_options import CacheEstimate, InputOptions, TimedOption
from infertune.optimize.served.policy_sweep import (
    BatchingEffect,
    PolicyResult,
    SimStats,
    SweepGrid,
    SweepResult,
)
from infertune.optimize.served.traffic import Contention, Validation

SCENARIO = Scenario.model_validate({
    "slo": {"p95_ms": 50, "p99_ms": 80},
    "traffic": {"pattern": "bursty", "mean_rps": 10, "peak_rps": 30},
    "deployment": {"cost_per_hour_usd": 0.2}})


def sim_stats() -> SimStats:
    return SimStats(30.0, 7.0, 12.5, 20.25, shed=0.002, utilisation=0.6, mean_batch=1.5,
                    requests=180)


def timing(kind: str = "proper") -> Timing:
    return Timing("int8", kind, 400, 3.0, 9.0, 11.5, 10.0, 30.0, 39.0, 0.3, (0.28, 0.33),
                  0.3, (0.25, 0.35), "B is faster", 10.5, latencies_ms=[3.0, 3.5, 9.0],
                  where=OWN_PROCESSES if kind == "proper" else ONE_PROCESS)


def screen_curve() -> ScreenCurve:
    return ScreenCurve([BatchPoint(1, 3.0, 20), BatchPoint(16, 24.0, 5)])


def served_screen() -> ServedScreen:
    return ServedScreen([1, 16], [BatchVerdict(1, "won", 0.3, "the baseline", 3.0, 10.0),
                                  BatchVerdict(16, "tie", 0.98, "fused", 24.0, 24.5)],
                        True, screen_curve())


def candidate() -> Candidate:
    return Candidate("int8", "ONNX Runtime int8", "pass", 0.995, (0.994, 0.996),
                     quick=timing("quick"), proper=timing(), dropped="", is_baseline=False,
                     served=served_screen())


def dropped_candidate() -> Candidate:
    return Candidate("bf16", "torch bf16", "fail", 0.91, None, quick=timing("quick"),
                     dropped="fails the quality floor")


def skipped() -> Skipped:
    return Skipped("variant torch_bf16", "not built: --quick", 30.0)


def policy_result() -> PolicyResult:
    return PolicyResult("b4-w2ms-x1-q64", {"max_batch_size": 4, "max_wait_ms": 2.0,
                                           "workers": 1, "max_queue": 64, "timeout_ms": 800.0},
                        at_mean=SimStats(10.0, 5.0, 8.0, 11.0, shed=0.0),
                        at_peak=SimStats(30.0, 6.0, 10.0, 14.0, shed=0.001, utilisation=0.7),
                        goodput_rps=41.5, cost_per_1k_usd=0.0013, validated_peak=sim_stats(),
                        capacity_rps=120.0)


def batching_effect() -> BatchingEffect:
    return BatchingEffect("peak", 30.0, "p95", 14.0, 10.0, 2.0, "helps",
                          "batching cuts p95 from 14 ms to 10 ms at the peak")


def sweep_result() -> SweepResult:
    return SweepResult("int8", {"p95": 50.0, "p99": 80.0}, 10.0, 30.0,
                       SweepGrid((1, 4), (0.0, 2.0), (1,), (64,)), 3,
                       [policy_result()], batching=[batching_effect()], cost_per_hour_usd=0.2,
                       cost_ceiling_usd_per_1k=0.01)


def tail(q: float, v: float) -> TailInterval:
    return TailInterval(q, v, 0.9 * v, None if q > 0.98 else 1.1 * v, 180, 12, 1.0)


def validation() -> Validation:
    return Validation(sim_stats(), 29.5, 0.4, 6.0, ["client lag above 5 ms"],
                      intervals={"p95": tail(0.95, 12.5), "p99": tail(0.99, 20.25)})


def contention() -> Contention:
    return Contention({1: 1.0, 2: 1.35}, batch_size=1, samples=20)


def input_options() -> InputOptions:
    trimming = TimedOption("input trimming", "max_length 256", "max_length 64", 4.0, 3.0, 5.0,
                           3.5, 0.7, 0.65, 0.75, "B is faster", 40, "trim to 64 tokens")
    return InputOptions(CacheEstimate(300, 0.1, 0.15, 4096, 0.1, "held-out data h.jsonl"), 64,
                        0.01, trimming, None, ["bucketing: too few inputs"])


def cascade_result() -> CascadeResult:
    return CascadeResult("candidate-small", "baseline", 64, 60,
                         CascadePoint(0.0, 0.0, 0.9, None, 2.0, 3.0, 4.0),
                         [CascadePoint(0.9, 0.25, 0.99, 0.87, 4.5, 12.0, 14.0)])


def right_sizing() -> RightSizing:
    return RightSizing(30.0, 12.5, 3, 2, 6, 0.6)


def search_plan() -> SearchPlan:
    return SearchPlan([PlannedPass("ort_int8", 2.1, 0.4, 12.0, 0.033, "issue 14 measurements"),
                       PlannedPass("onnx_export", 1.1, 0.0, 8.0, 0.0, "neutral",
                                   needed_by="ort_int8")], "vnni", "a call of 4.0 ms")


def cost_facts() -> CostFacts:
    return CostFacts(4.0, 1.5, cal_item_ms=1.2, export_s=8.3, params_m=22.7, matmuls=36)


def built_variant(root: Path) -> BuiltVariant:
    return BuiltVariant("int8", root / "variants" / "int8", "ONNX Runtime int8",
                        manifest=Manifest("int8", "onnxruntime", "int8", "text", "embedding",
                                          "model.onnx"), build_s=3.5)


def load_curve() -> LoadCurve:
    return LoadCurve("b4-w2ms-x1-q64", [(7.5, 9.0), (30.0, 12.25)])


def service_curve() -> ServiceCurve:
    return ServiceCurve([CurvePoint(1, 32, 3.0, 3.5, 3.1, 20, 333.3)], typical_seq_len=32,
                        runtime="onnxruntime")


def variant_result() -> VariantResult:
    manifest = Manifest("int8", "onnxruntime", "int8", "text", "embedding", "model.onnx",
                        notes=["dynamic int8"])
    return VariantResult("ort_int8", "built", path="/runs/r/variants/int8", manifest=manifest,
                         seconds=3.25)


def run_record(root: Path) -> RunRecord:
    return RunRecord(
        model="minilm", scenario=SCENARIO, data_source="held.jsonl", quick=True,
        task="embedding", baseline_runtime="torch", quality_count=64, **by_stage(
        hardware_label="test cpu (2 cores)", baseline_variant_id="torch_fp32",
        built=[built_variant(root), BuiltVariant("bf16", None, "torch bf16", skipped="no bf16",
                                                 is_baseline=False)],
        candidates=[candidate(), dropped_candidate()], candidate_models=[dropped_candidate()],
        sweep=sweep_result(), finalist_sweeps=[sweep_result()],
        validations={"int8|b4-w2ms-x1-q64|peak": validation()}, curve=service_curve(),
        input_options=input_options(), cascades=[cascade_result()],
        right_sizing=right_sizing(), load_curves=[load_curve()], skipped=[skipped()],
        notes=["a note"], stage_seconds={"setup": 0.1, "screen": 12.5},
        cost_facts=cost_facts(), search_plan=search_plan(),
        budget_choice=BudgetChoice(120.0, 118.5, "--budget auto: 120 s"),
        budget_estimate=BudgetEstimate(150.5, 100.0, 50.5, "a call of 4.0 ms")))


def samples(root: Path) -> dict[str, Any]:
    """Every sample, by name (the test ids)."""
    return {
        "SimStats": sim_stats(), "Timing": timing(), "ScreenCurve": screen_curve(),
        "ServedScreen": served_screen(), "Candidate": candidate(),
        "Candidate-dropped": dropped_candidate(), "Skipped": skipped(),
        "PolicyResult": policy_result(), "BatchingEffect": batching_effect(),
        "SweepResult": sweep_result(), "Validation": validation(),
        "Contention": contention(), "InputOptions": input_options(),
        "CascadeResult": cascade_result(), "RightSizing": right_sizing(),
        "SearchPlan": search_plan(), "BudgetChoice": BudgetChoice(120.0, 118.5, "why"),
        "BudgetEstimate": BudgetEstimate(150.5, 100.0, 50.5, "basis"),
        "LoadCurve": load_curve(), "BuiltVariant": built_variant(root),
        "VariantResult": variant_result(), "RunRecord": run_record(root),
        "VariantResult-skipped": VariantResult("ort_fp16", "skipped", reason="no GPU"),
        "CostFacts": cost_facts(), "EngineVerdict": engine_verdict(),
        "RunRecord-bare": RunRecord(model="minilm", scenario=SCENARIO, data_source="bundled",
                                    quick=False, task="embedding", baseline_runtime="torch",
                                    quality_count=32)}


def engine_verdict() -> EngineVerdict:
    return EngineVerdict("OpenVINO bf16", "openvino", "bf16", "cpu", False,
                         "needs amx_bf16 (not on this CPU)", ("ov_bf16", "ov_bf16_static"))
