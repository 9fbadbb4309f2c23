"""Variant ranking uses each variant's own percentile against one common baseline figure,
so a run whose baseline side happened to be slow cannot carry a slower variant to the top."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from infertune.config import Scenario
from infertune.data import HeldOut
from infertune.optimize.findings import by_stage
from infertune.optimize.record import RunRecord
from infertune.optimize.search.choice import best_adapter, recommended_candidate
from infertune.optimize.search.timing import Candidate, Timing
from infertune.optimize.state import OptimizeOptions, RunPaths, RunState
from infertune.report.run_sections import rank_options, recommendation, variant_options


def timing(vid: str, p95: float, base_p95: float) -> Timing:
    return Timing(vid, "proper", 400, p95 / 3, p95, p95 * 1.3, base_p95 / 3, base_p95,
                  base_p95 * 1.3, p95 / base_p95, (0.1, 0.2), p95 / base_p95, (0.1, 0.2),
                  "B is faster", 10.0)


def test_a_slow_baseline_run_does_not_win_the_ranking(tmp_path: Path) -> None:
    opts = OptimizeOptions(model="m", scenario=Scenario(), data=HeldOut(["a", "b"], None, "t"),
                           out=tmp_path)
    state = RunState(options=opts, paths=RunPaths(tmp_path), **by_stage(hardware_label="test cpu"),
                     baseline=SimpleNamespace(info=SimpleNamespace(task="embedding",
                                                                  runtime="torch")))
    # fp32: 33 ms against a 900 ms baseline side (ratio 0.037); int8: 9 ms against 100 ms (0.09)
    state.screen.candidates = [
        Candidate("fp32", "fp32", "pass", 1.0, (1.0, 1.0), proper=timing("fp32", 33.0, 900.0)),
        Candidate("int8", "int8", "pass", 0.994, (0.993, 0.995),
                  proper=timing("int8", 9.0, 100.0)),
        Candidate("mid", "mid", "pass", 0.999, (0.998, 1.0), proper=timing("mid", 20.0, 120.0)),
    ]
    run = RunRecord.from_state(state)
    ranked = rank_options(run, variant_options(run), inside=False)
    assert [o.id for o in ranked] == ["variant-int8", "variant-mid", "variant-fp32"]
    assert recommended_candidate(run, inside=False).variant_id == "int8"
    # the serving sweep tunes the variant the report recommends
    state.adapters = {"int8": "int8-adapter", "fp32": "fp32-adapter", "mid": "mid-adapter"}
    assert best_adapter(state) == ("int8", "int8-adapter")
    # the displayed impact is still each pair's own measured ratio
    fp32 = next(o for o in ranked if o.id == "variant-fp32")
    assert fp32.impact.p95.value == round((33.0 / 900.0 - 1) * 100, 1)
    assert fp32.impact.p95.source == "measured"


def test_no_measurably_faster_variant_keeps_the_baseline(tmp_path: Path) -> None:
    opts = OptimizeOptions(model="m", scenario=Scenario(), data=HeldOut(["a", "b"], None, "t"),
                           out=tmp_path)
    state = RunState(options=opts, paths=RunPaths(tmp_path), **by_stage(hardware_label="test cpu"),
                     baseline=SimpleNamespace(info=SimpleNamespace(task="embedding",
                                                                  runtime="torch")))
    state.build.baseline_variant_id = "ort_fp32"
    same = timing("int8", 10.0, 10.0)
    same.verdict, same.ratio_p95_ci = "no significant difference", (0.9, 1.1)
    state.screen.candidates = [Candidate("int8", "int8", "pass", 0.999, (0.998, 1.0), proper=same)]
    rec, serving = recommendation(RunRecord.from_state(state), inside=False)
    assert rec.variant_id == "ort_fp32" and rec.title == "Keep the baseline model"
    assert "no variant that meets the quality floor was measurably faster" in rec.reason
    assert serving.variant_id == "ort_fp32"
