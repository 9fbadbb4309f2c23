"""Interleaved comparisons with each side in its own process (measure/arm_process.py): the
child times predict itself, a model that cannot load or a request that fails says so in one
line, and optimize's proper A/B uses two processes, or says it ran both sides in one."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from onnx_graphs import WIDTH, make_mlp

from infertune.measure.arm_process import ArmFailed, ArmProcess
from infertune.measure.compare import run_interleaved
from infertune.models import load
from infertune.optimize.findings import RunLog
from infertune.optimize.search.timing import ONE_PROCESS, OWN_PROCESSES, Timing
from infertune.optimize.stages.survivors import _arm, _proper_timing

REQUEST = [np.zeros(WIDTH, np.float32)]


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_mlp(tmp_path_factory.mktemp("arm") / "mlp.onnx")


@pytest.fixture(scope="module")
def base(mlp: Path):
    """One timing process for the module's tests (each start imports the model libraries)."""
    with ArmProcess(str(mlp)) as arm:
        yield arm


def test_the_child_loads_the_model_and_times_each_request_itself(mlp: Path) -> None:
    with ArmProcess(str(mlp)) as arm:
        assert arm.pid != os.getpid()
        took = [arm(REQUEST) for _ in range(5)]
        assert all(0.0 < t < 5.0 for t in took)
    assert not arm.alive  # stopped with the context


def test_a_model_that_cannot_load_fails_in_one_line_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model.onnx"
    with pytest.raises(ArmFailed, match="no-such-model.onnx: the timing process could not "
                                        "load it"):
        ArmProcess(str(missing))
    # optimize's proper A/B then runs both sides in its own process, and its notes say why
    state = SimpleNamespace(log=RunLog())
    assert _arm(state, str(missing), "the baseline") is None  # type: ignore[arg-type]
    assert state.log.notes[0].startswith("the baseline could not be loaded in a process of its "
                                     "own (")
    assert "no-such-model.onnx" in state.log.notes[0] and "both sides in this process" in \
        state.log.notes[0]


def test_a_failing_request_is_reported_and_the_child_keeps_serving(base: ArmProcess) -> None:
    with pytest.raises(ArmFailed, match="failed a request"):
        base([np.zeros(WIDTH + 3, np.float32)])  # the wrong width for the graph
    assert base(REQUEST) > 0.0


def test_self_timed_samples_are_the_times_the_calls_report() -> None:
    # the calls' own durations are the samples, whatever the pipe or this process adds
    result = run_interleaved(lambda _r: 0.004, lambda _r: 0.002, [[0]] * 4, budget_s=0.0,
                             block_size=4, min_trials=1, warmup=1, self_timed=True)
    assert result.a_summary.p50 == pytest.approx(4.0)
    assert result.b_summary.p50 == pytest.approx(2.0)


def test_the_proper_ab_runs_each_side_in_its_own_process(mlp: Path, base: ArmProcess) -> None:
    adapter = load(mlp)
    state = SimpleNamespace(options=SimpleNamespace(seed=0), requests=[REQUEST], log=RunLog(),
                            adapters={"v": adapter}, baseline=adapter)
    timing = _proper_timing(state, "v", mlp, base, 1.0)  # type: ignore[arg-type]
    assert timing.where == OWN_PROCESSES and timing.samples >= 20 and state.log.notes == []
    assert Timing.from_dict(timing.to_dict()).where == OWN_PROCESSES
    older = {k: v for k, v in timing.to_dict().items() if k != "where"}  # a run before it
    assert Timing.from_dict(older).where == ONE_PROCESS
    # no variant folder to load in a process of its own: both sides here, and it says so
    here = _proper_timing(state, "v", None, base, 1.0)  # type: ignore[arg-type]
    assert here.where == ONE_PROCESS and here.samples >= 20
