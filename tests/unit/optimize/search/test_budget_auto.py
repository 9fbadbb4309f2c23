"""`--budget auto` and the complete-search figure (optimize/search/costs.py): sized from the model's
parameters and measured export and call times (injected here), bigger for a bigger model,
bounded, and bad --budget values refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from infertune.cli import main
from infertune.optimize.search.builder import FULL_PASSES, QUICK_PASSES
from infertune.optimize.search.costs import (
    AUTO_MAX_S,
    AUTO_MIN_S,
    EXPORT_S_PER_MPARAM,
    BudgetChoice,
    BudgetEstimate,
    CostFacts,
    auto_budget,
    budget_estimate,
    complete_search_s,
    params_millions,
)

SCENARIO = Path(__file__).resolve().parents[4] / "examples" / "scenarios" / "minilm-cpu.yaml"
MINILM = CostFacts(call_ms=15.0, item_ms=5.0, export_s=9.0, params_m=22.7, matmuls=48,
                   schemes=2)
BERT_BASE = CostFacts(call_ms=150.0, item_ms=60.0, export_s=40.0, params_m=110.0, matmuls=96,
                      schemes=2)


def test_a_bigger_model_gets_a_bigger_budget() -> None:
    small = auto_budget(list(FULL_PASSES), MINILM)
    big = auto_budget(list(FULL_PASSES), BERT_BASE)
    assert AUTO_MIN_S <= small.seconds < big.seconds <= AUTO_MAX_S
    # each measured time on its own raises it
    for change in ({"call_ms": 60.0}, {"item_ms": 20.0}, {"export_s": 30.0}, {"matmuls": 96}):
        bigger = CostFacts(**{**MINILM.to_dict(), **change})
        assert auto_budget(list(FULL_PASSES), bigger).seconds > small.seconds, change


def test_auto_says_what_it_chose_and_from_what() -> None:
    choice = auto_budget(list(FULL_PASSES), MINILM)
    assert choice.reason.startswith(f"--budget auto: {choice.seconds:.0f} s")
    assert "15.0 ms" in choice.reason and "ONNX export of 9 s, measured here" in choice.reason
    assert BudgetChoice.from_dict(choice.to_dict()) == choice


def test_before_the_export_is_measured_it_is_scaled_from_the_parameters() -> None:
    unmeasured = CostFacts(call_ms=15.0, item_ms=5.0, params_m=110.0)
    assert unmeasured.export == pytest.approx(110.0 * EXPORT_S_PER_MPARAM)
    assert "110M parameters" in unmeasured.basis and "estimated" in unmeasured.basis


def test_auto_is_capped_and_says_so() -> None:
    huge = CostFacts(call_ms=5000.0, item_ms=4000.0, export_s=900.0, matmuls=400, schemes=2)
    choice = auto_budget(list(FULL_PASSES), huge)
    assert choice.seconds == AUTO_MAX_S and choice.needed_s > AUTO_MAX_S
    assert "capped" in choice.reason


def test_quick_plan_needs_less_than_the_full_one() -> None:
    assert complete_search_s(list(QUICK_PASSES), BERT_BASE) \
        < complete_search_s(list(FULL_PASSES), BERT_BASE)


def test_params_are_counted_from_the_weight_files(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 4_000_000)  # 1M fp32 parameters
    (tmp_path / "vocab.txt").write_text("not weights\n")
    assert params_millions(tmp_path) == 1.0
    assert params_millions(tmp_path / "model.safetensors") == 1.0
    assert params_millions(tmp_path / "missing") is None


def test_complete_search_figure_is_measured_plus_estimated() -> None:
    est = budget_estimate({"profile baseline": 20.0, "build variants": 100.0}, [30.0, 12.5],
                          MINILM)
    assert (est.seconds, est.measured_s, est.estimated_s) == (162.5, 120.0, 42.5)
    text = est.sentence()
    assert "about 162 s" in text and "120 s the stages took here (measured)" in text
    assert "ONNX export of 9 s, measured here" in text and "--budget 3m" in text
    assert BudgetEstimate.from_dict(est.to_dict()) == est
    done = budget_estimate({"all": 50.0}, [], None)
    assert "every planned step ran" in done.sentence()


@pytest.mark.parametrize(("value", "message"), [
    ("soon", "--budget 'soon' is not a duration"),
    ("autox", "or pass --budget auto"),
    ("0", "--budget must be > 0"),
    ("-5m", "is not a duration"),
    ("30s", "too small to measure"),
])
def test_bad_budget_is_one_line_exit_1(value: str, message: str, capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    rc = main(["optimize", "minilm", "--scenario", str(SCENARIO), "--budget", value,
               "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert rc == 1 and len(errors) == 1 and message in errors[0], err
    assert not (tmp_path / "run").exists()


def _state(tiny_adapter, tmp_path: Path, auto: bool):
    from optimize_tiny_helpers import SENTENCES

    from infertune.config import load_scenario
    from infertune.data import HeldOut
    from infertune.optimize.search.timing import batch1_requests
    from infertune.optimize.state import OptimizeOptions, RunPaths, RunState

    options = OptimizeOptions(model="tiny", scenario=load_scenario(SCENARIO),
                              data=HeldOut(list(SENTENCES), None, "test"), out=tmp_path,
                              budget_s=330.0, budget_auto=auto)
    state = RunState(options=options, paths=RunPaths(tmp_path), baseline=tiny_adapter)
    state.quality_inputs = list(SENTENCES)
    state.requests = batch1_requests(SENTENCES, 40)
    return state


def test_size_budget_times_the_model_and_resizes_only_when_auto(tiny_adapter,
                                                                 tmp_path: Path) -> None:
    from infertune.optimize.search import sizing
    from infertune.optimize.search.budget import Budget, NullProgress
    from infertune.optimize.search.sizing import params_m

    state, budget = _state(tiny_adapter, tmp_path, auto=True), Budget(330.0)
    sizing.size_budget(state, budget, NullProgress())
    choice = state.log.budget_choice
    assert choice is not None and budget.total_s == choice.seconds
    assert choice.reason in state.log.notes and "measured here" in choice.reason
    # the tiny model's weight files are counted (well under 1M), not the scenario's 22.7M
    counted = params_m(state)
    assert counted is not None and counted < 1.0
    assert f"{counted:.3g}M parameters" in choice.reason

    fixed, budget = _state(tiny_adapter, tmp_path, auto=False), Budget(330.0)
    sizing.size_budget(fixed, budget, NullProgress())
    assert fixed.log.budget_choice is None and budget.total_s == 330.0


def test_quality_count_fits_the_call_time() -> None:
    from infertune.optimize.search.sizing import MIN_QUALITY, quality_count

    assert quality_count(300, 15.0, 330.0) == 300  # minilm-like: all of them
    assert quality_count(300, 300.0, 330.0) == 88  # 8% of 330 s at 0.3 s an input
    assert quality_count(300, 1500.0, 330.0) == MIN_QUALITY  # never under the minimum
    assert quality_count(40, 1500.0, 330.0) == 40  # nor more than there are


def test_profile_counts_fit_the_call_time(tiny_adapter, tmp_path: Path) -> None:
    from infertune.measure.profile import ProfileSettings
    from infertune.optimize.search.sizing import fit_profile

    full = ProfileSettings(batch_sizes=(1, 4, 16), requests=200, rounds=3, stage_seconds=12.0,
                           min_round_requests=25, warmup=10, curve_repeats=5,
                           cold_start=True)
    state = _state(tiny_adapter, tmp_path, auto=False)
    state.log.cost_facts = CostFacts(call_ms=15.0, item_ms=8.0)
    assert fit_profile(state, full, 40.0) == full and not state.log.notes  # a small model: as is
    state.log.cost_facts = CostFacts(call_ms=1000.0, item_ms=600.0)  # a second a call
    slow = fit_profile(state, full, 40.0)
    assert slow.min_round_requests == 5 and slow.batch_sizes == (1,) and not slow.cold_start
    assert slow.warmup == 4 and slow.curve_repeats == 2 and slow.hotspot_calls == 1
    assert "1000 ms" in state.log.notes[-1] and "no cold start" in state.log.notes[-1]


def test_the_budget_that_would_measure_int8_is_stated(tiny_adapter, tmp_path: Path) -> None:
    from infertune.optimize.findings import BuiltVariant
    from infertune.optimize.search.sizing import int8_budget_note

    state = _state(tiny_adapter, tmp_path, auto=False)
    built = [BuiltVariant("ort_fp32", tmp_path, "export")]
    state.skip("variant ort_int8_dynamic_per_channel", "not built: with its sources ...", 90.0)
    state.skip("variant ort_int8_mixed", "not built: with its sources ...", 900.0)
    note = int8_budget_note(built, state.log.skipped, 120.0, 0.45)
    # (120 s spent + 90 s it needs) / 0.45 of the budget for building = 467 s
    assert note is not None and "ort_int8_dynamic_per_channel" in note
    assert "about 467 s" in note and "--budget 8m" in note
    built.append(BuiltVariant("ort_int8_threads_one", tmp_path, "int8"))
    assert int8_budget_note(built, state.log.skipped, 120.0, 0.45) is None  # one was built
