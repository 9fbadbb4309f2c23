"""The default builder on the tiny BERT: the export first, then the passes in the order of
expected gain per second on an injected CPU, re-planned from measured times, and a pass whose
estimated cost does not fit the build share left out with that estimate as its need."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from cpu_profiles import profile_hardware, this_cpu
from optimize_tiny_helpers import SENTENCES

from infertune.config import load_scenario
from infertune.data import HeldOut
from infertune.optimize.search.budget import NullProgress
from infertune.optimize.search.builder import default_builder
from infertune.optimize.search.costs import CostFacts
from infertune.optimize.search.timing import batch1_requests
from infertune.optimize.state import OptimizeOptions, RunPaths, RunState

SCENARIO = Path(__file__).resolve().parents[4] / "examples" / "scenarios" / "minilm-cpu.yaml"
pytestmark = pytest.mark.slow  # builds the tiny BERT's variants (seconds each on 2 cores)


def _state(tiny_adapter, root: Path, cal_item_ms: float) -> RunState:
    options = OptimizeOptions(model="tiny", scenario=load_scenario(SCENARIO),
                              data=HeldOut(list(SENTENCES), None, "test"), out=root)
    state = RunState(options=options, paths=RunPaths(root), baseline=tiny_adapter)
    state.paths.create()
    # a VNNI CPU's flags on top of this machine's description (the INT8 numerics are not
    # judged here, only the order), and measured times injected
    zen4 = profile_hardware("zen4", root / "cpu", cores=2)
    state.profiling.hardware = replace(this_cpu(), flags=zen4.flags)
    state.quality_inputs = list(SENTENCES)
    state.requests = batch1_requests(SENTENCES, 40)
    state.log.cost_facts = CostFacts(call_ms=2.0, item_ms=1.0, cal_item_ms=cal_item_ms,
                                 n_quality=len(SENTENCES))
    return state


def test_builds_by_expected_gain_and_leaves_out_what_does_not_fit(tiny_adapter,
                                                                  tmp_path: Path) -> None:
    # scoring the calibration inputs said to cost 2 s an input: every INT8 pass that scores
    # (per-channel: a scheme choice; mixed: one scoring per MatMul) is far over a 60 s share
    state = _state(tiny_adapter, tmp_path / "slow", cal_item_ms=2000.0)
    found = default_builder(state, 60.0, NullProgress())
    built = found.built
    ids = [b.variant_id for b in built]
    assert ids[:2] == ["torch_fp32", "ort_fp32"]  # the baseline's copy and the export first
    assert "ort_fused" in ids and "ort_int8_mixed" not in ids
    left_out = {s.what: s for s in state.log.skipped}
    mixed = left_out["variant ort_int8_mixed"]
    assert "would take about" in mixed.reason and mixed.need_s is not None
    assert mixed.need_s > 60.0  # the estimate, not a fixed minimum
    assert found.search_plan is not None and found.search_plan.int8_path == "vnni"
    facts = state.log.cost_facts
    assert facts is not None and facts.export_s is not None  # measured
    assert all(b.build_s is not None and b.build_s > 0 for b in built if not b.skipped)

    # with cheap scoring, INT8 per-channel is built right after the fusion it derives from,
    # before every thread plan
    state = _state(tiny_adapter, tmp_path / "fast", cal_item_ms=0.5)
    order = [b.variant_id for b in default_builder(state, 300.0, NullProgress()).built]
    int8 = order.index("ort_int8_dynamic_per_channel")
    assert order.index("ort_fused") < int8
    for threads in ("ort_threads_cores_nospin", "ort_int8_threads_one"):
        assert int8 < order.index(threads), order
