"""The high-throughput example scenario (issue 27) reads as the built-in model's, with its
p99 <= 100 ms target and a 600 req/s peak."""

from __future__ import annotations

from pathlib import Path

from infertune.config import load_scenario

EXAMPLE = Path(__file__).resolve().parents[2] / "examples/scenarios/minilm-cpu-throughput.yaml"


def test_the_throughput_scenario_states_its_targets():
    scenario = load_scenario(EXAMPLE)
    assert scenario.slo.targets() == {"p99": 100.0}
    assert (scenario.traffic.peak_rps, scenario.traffic.pattern) == (600.0, "bursty")
    assert scenario.model.task == "embedding"
    assert scenario.constraints.quality_floor.min == 0.99
    assert scenario.missing_facts() == []
