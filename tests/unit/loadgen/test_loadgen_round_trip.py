"""Every loadgen artifact round-trips through JSON by the one serialisation (Serial), and the
main ones write exactly the dict the hand-written to_dict wrote before (the OLD_* literals were
captured by running that code on these instances), so files written then still load."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from infertune.loadgen.llm_sweep import SweepProbe, SweepResult
from infertune.loadgen.result import LoadResult, TimelinePoint
from infertune.loadgen.schedules import ScheduleSpec, ScheduleStats
from infertune.loadgen.server_sim import SimResult
from infertune.loadgen.streaming_result import (
    SloVerdict,
    StreamingResult,
    StreamRecord,
    TokenCounts,
    TokenSLO,
)
from infertune.measure.histogram import LatencyHistogram
from infertune.measure.summary import Estimate, LatencySummary

STATS = ScheduleStats(count=100, duration_s=10.0, mean_rate=10.0, peak_1s_rate=17.0,
                      gap_scv=1.25)
E2E = LatencySummary(count=98, mean=Estimate(20.0, 19.0, 21.5), min=8.0, max=95.0,
                     percentiles={"p50": Estimate(18.0, 17.0, 19.0),
                                  "p95": Estimate(40.0, 35.0, 46.0)},
                     tail_note="p99 from 98 samples: 0 in the top 1%")
TTFT = LatencySummary(count=98, mean=Estimate(9.0), min=4.0, max=30.0,
                      percentiles={"p95": Estimate(22.0, 20.0, 25.0)})
LOAD = LoadResult(
    target="http://127.0.0.1:8000/predict", schedule=STATS, sent=100, ok=98, target_rate=10.0,
    achieved_rate=9.9, goodput_rps=9.7, latency=E2E,
    histogram=LatencyHistogram.from_ms([5.0, 7.5, 12.0]),
    client_lag_ms={"p50": 0.25, "p99": 1.5, "max": 3.0}, status_counts={"200": 98, "503": 2},
    sheds=2, errors=0, waited_for_slot=3, server_timing_ms={"queue": 1.5, "inference": 9.0},
    timeline=[TimelinePoint(0, 10, 17.0, 30.0), TimelinePoint(1, 0, None, None)],
    warnings=["the client could not keep up"], utilisation=0.6)
EMPTY_LOAD = LoadResult(
    target="inprocess:tiny", schedule=ScheduleStats(0, 5.0, 0.0, 0.0, 0.0), sent=0, ok=0,
    target_rate=0.0, achieved_rate=0.0, goodput_rps=0.0, latency=None,
    histogram=LatencyHistogram(), client_lag_ms={"p50": 0.0, "p99": 0.0, "max": 0.0},
    status_counts={}, sheds=0, errors=0, waited_for_slot=0, server_timing_ms={}, timeline=[])
TTFT_SLO = TokenSLO("ttft", 95.0, 500.0)
STREAMING = StreamingResult(
    api="openai-chat", load=LOAD, ttft=TTFT, itl=None, tpot=TTFT,
    output_tokens=TokenCounts(total=3136, mean=32.0, min=12, max=64, source="usage"),
    output_tokens_per_s=313.6, requests_per_s=9.8,
    slos=[SloVerdict(TTFT_SLO, 22.0, True), SloVerdict(TokenSLO("itl", 99.0, 50.0), None, False)],
    goodput_rps=9.5, goodput_share=0.95, warnings=["output token counts are approximate"],
    prompt_tokens=TokenCounts(total=980, mean=10.0, min=10, max=10, source="usage"))
BARE_STREAMING = StreamingResult(
    api="openai-completions", load=EMPTY_LOAD, ttft=None, itl=None, tpot=None,
    output_tokens=None, output_tokens_per_s=0.0, requests_per_s=0.0, slos=[], goodput_rps=0.0,
    goodput_share=0.0)
SWEEP = SweepResult(
    probes=[SweepProbe(10.0, STREAMING, True, "every SLO met"),
            SweepProbe(20.0, BARE_STREAMING, False, "missed ttft_p95_ms 600.0 > 500")],
    best_rate=10.0, stopped="ran all 2 probes", notes=["bisect further with --sweep-steps"])
SPEC = ScheduleSpec(shape="trace", rate=5.0, duration_s=None, seed=4, burstiness=0.5,
                    peak_rate=40.0, burst_s=1.0, gap_s=4.0, trace=Path("traces/day.csv"),
                    trace_scale=2.0)
SIM = SimResult(
    policy={"max_batch_size": 8, "max_wait_ms": 5.0, "workers": 2}, requests=1000,
    completed=990, rejected=6, shed=4, mean_ms=12.5, p50_ms=11.0, p95_ms=20.0, p99_ms=30.0,
    mean_wait_ms=2.5, wait_p99_ms=6.0, utilisation=0.7, mean_batch_size=3.5, span_s=100.0)
RECORD = StreamRecord(index=7, intended_s=1.0, sent_s=1.0005, done_s=1.5, status="200",
                      token_s=[1.1, 1.2, 1.35], output_tokens=4, prompt_tokens=12,
                      token_source="tokenizer", server_timing_ms={"queue": 2.0},
                      server_gaps_ms=[100.0, 150.0], cached_tokens=8)

CASES: list[Any] = [
    STATS, SPEC, ScheduleSpec(), TimelinePoint(3, 0, None, None), LOAD, EMPTY_LOAD, TTFT_SLO,
    RECORD, StreamRecord(0, 0.0, 0.0, 0.5, "timeout"), SloVerdict(TTFT_SLO, 22.0, True),
    TokenCounts(100, 10.0, 5, 20, "approximate"), STREAMING, BARE_STREAMING, SWEEP.probes[0],
    SWEEP, SweepResult([], None, "the client could not keep up at 5 req/s"), SIM,
    SimResult({}, 0, 0, 0, 0, None, None, None, None, None, None, 0.0, 0.0, 0.0, source="x"),
]


def comparable(value: Any) -> Any:
    """``value`` with every LatencyHistogram replaced by its encoded form: the histogram has no
    ``__eq__`` (two equal HdrHistograms compare by identity), so == alone cannot see a round
    trip through JSON."""
    if isinstance(value, LatencyHistogram):
        return ("LatencyHistogram", value.encode())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__,
                {f.name: comparable(getattr(value, f.name)) for f in dataclasses.fields(value)})
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(comparable(v) for v in value)
    return value


@pytest.mark.parametrize("obj", CASES, ids=lambda o: type(o).__name__)
def test_round_trip_through_json(obj: Any) -> None:
    back = type(obj).from_dict(json.loads(json.dumps(obj.to_dict())))
    assert comparable(back) == comparable(obj)


OLD_STATS = {"count": 100, "duration_s": 10.0, "mean_rate": 10.0, "peak_1s_rate": 17.0,
             "gap_scv": 1.25}
OLD_LOAD = {
    "target": "http://127.0.0.1:8000/predict", "schedule": OLD_STATS, "sent": 100, "ok": 98,
    "target_rate": 10.0, "achieved_rate": 9.9, "goodput_rps": 9.7,
    "latency": {"count": 98, "unit": "ms",
                "mean": {"value": 20.0, "low": 19.0, "high": 21.5, "unit": "ms"},
                "min": 8.0, "max": 95.0,
                "percentiles": {"p50": {"value": 18.0, "low": 17.0, "high": 19.0, "unit": "ms"},
                                "p95": {"value": 40.0, "low": 35.0, "high": 46.0, "unit": "ms"}},
                "tail_note": "p99 from 98 samples: 0 in the top 1%", "clamped": 0},
    "histogram": {"unit": "us", "significant_figures": 3, "count": 3, "clamped": 0,
                  "encoded": "hdr1:0:HISTFAAAACl4nJNpmSzMwMDAyQABzFCaEURcm7yEwf4DROCwMdN9TqZ+"
                             "LiYAisYHDQ=="},
    "client_lag_ms": {"p50": 0.25, "p99": 1.5, "max": 3.0},
    "status_counts": {"200": 98, "503": 2}, "sheds": 2, "errors": 0, "waited_for_slot": 3,
    "server_timing_ms": {"queue": 1.5, "inference": 9.0},
    "timeline": [{"second": 0, "count": 10, "p50_ms": 17.0, "p99_ms": 30.0},
                 {"second": 1, "count": 0, "p50_ms": None, "p99_ms": None}],
    "warnings": ["the client could not keep up"], "utilisation": 0.6}
OLD_TTFT = {"count": 98, "unit": "ms",
            "mean": {"value": 9.0, "low": None, "high": None, "unit": "ms"},
            "min": 4.0, "max": 30.0,
            "percentiles": {"p95": {"value": 22.0, "low": 20.0, "high": 25.0, "unit": "ms"}},
            "tail_note": "", "clamped": 0}
OLD_STREAMING = {
    "api": "openai-chat", "load": OLD_LOAD, "ttft": OLD_TTFT, "itl": None, "tpot": OLD_TTFT,
    "output_tokens": {"total": 3136, "mean": 32.0, "min": 12, "max": 64, "source": "usage"},
    "output_tokens_per_s": 313.6, "requests_per_s": 9.8,
    "slos": [{"slo": {"metric": "ttft", "percentile": 95.0, "limit_ms": 500.0},
              "measured_ms": 22.0, "met": True},
             {"slo": {"metric": "itl", "percentile": 99.0, "limit_ms": 50.0},
              "measured_ms": None, "met": False}],
    "goodput_rps": 9.5, "goodput_share": 0.95, "meets_slos": False,
    "warnings": ["output token counts are approximate"],
    "prompt_tokens": {"total": 980, "mean": 10.0, "min": 10, "max": 10, "source": "usage"}}
OLD_SPEC = {"shape": "trace", "rate": 5.0, "duration_s": None, "seed": 4, "burstiness": 0.5,
            "peak_rate": 40.0, "burst_s": 1.0, "gap_s": 4.0, "trace": "traces/day.csv",
            "trace_scale": 2.0}
OLD_SIM = {
    "policy": {"max_batch_size": 8, "max_wait_ms": 5.0, "workers": 2}, "requests": 1000,
    "completed": 990, "rejected": 6, "shed": 4, "mean_ms": 12.5, "p50_ms": 11.0,
    "p95_ms": 20.0, "p99_ms": 30.0, "mean_wait_ms": 2.5, "wait_p99_ms": 6.0,
    "utilisation": 0.7, "mean_batch_size": 3.5, "span_s": 100.0,
    "source": "simulated (discrete-event model of the batcher; service times from a curve)",
    "reject_rate": 0.006, "shed_rate": 0.004}
OLD_RECORD = {"index": 7, "intended_s": 1.0, "sent_s": 1.0005, "done_s": 1.5, "status": "200",
              "token_s": [1.1, 1.2, 1.35], "output_tokens": 4, "prompt_tokens": 12,
              "token_source": "tokenizer", "server_timing_ms": {"queue": 2.0},
              "server_gaps_ms": [100.0, 150.0], "cached_tokens": 8}

OLD: list[tuple[Any, dict[str, Any]]] = [
    (STATS, OLD_STATS), (LOAD, OLD_LOAD), (STREAMING, OLD_STREAMING), (SPEC, OLD_SPEC),
    (SIM, OLD_SIM), (RECORD, OLD_RECORD),
]


@pytest.mark.parametrize(("obj", "old"), OLD, ids=lambda o: type(o).__name__)
def test_writes_and_reads_what_the_hand_written_code_wrote(obj: Any, old: dict[str, Any]
                                                           ) -> None:
    assert obj.to_dict() == old
    assert comparable(type(obj).from_dict(old)) == comparable(obj)


def test_a_sweep_writes_its_probes_results_in_full() -> None:
    data = SWEEP.to_dict()
    assert data["best_rate"] == 10.0 and data["notes"] == ["bisect further with --sweep-steps"]
    assert [(p["rate"], p["passed"], p["why"]) for p in data["probes"]] == [
        (10.0, True, "every SLO met"), (20.0, False, "missed ttft_p95_ms 600.0 > 500")]
    assert data["probes"][0]["result"] == OLD_STREAMING
