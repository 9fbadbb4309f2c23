"""Scenario validation: the shipped examples, and each kind of bad file as one ConfigError."""

from __future__ import annotations

from pathlib import Path

import pytest

from infertune.config import FACTS, Scenario, ServePolicy, load_scenario
from infertune.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scenarios"


def _scenario(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _error(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    return message


def test_minilm_example_loads() -> None:
    scenario = load_scenario(EXAMPLES / "minilm-cpu.yaml")
    assert scenario.model.task == "embedding"
    assert scenario.slo.targets() == {"p95": 15.0, "p99": 30.0}
    assert scenario.traffic.pattern == "bursty"
    assert scenario.missing_facts() == []


def test_minilm_p99_100ms_example_is_the_demo_with_serve_goodputs_target() -> None:
    demo = load_scenario(EXAMPLES / "minilm-cpu.yaml")
    relaxed = load_scenario(EXAMPLES / "minilm-cpu-p99-100ms.yaml")
    assert relaxed.slo.targets() == {"p99": 100.0}
    assert relaxed.traffic == demo.traffic and relaxed.model == demo.model
    assert relaxed.constraints == demo.constraints and relaxed.missing_facts() == []


def test_reranker_example_loads() -> None:
    scenario = load_scenario(EXAMPLES / "reranker-t4.yaml")
    assert scenario.model.task == "reranking"
    assert scenario.deployment.hardware.gpu == "T4"
    assert scenario.current.p95_ms == 480
    assert scenario.slo.targets() == {"p95": 150.0}
    assert scenario.traffic.pattern == "spiky"
    assert scenario.constraints.quality_floor.max_drop == 0.005


def test_negative_slo_is_rejected(tmp_path: Path) -> None:
    message = _error(_scenario(tmp_path, "slo: {p95_ms: -5}\n"))
    assert "slo.p95_ms" in message and "-5" in message and "greater than 0" in message


def test_p95_below_p50_is_rejected(tmp_path: Path) -> None:
    message = _error(_scenario(tmp_path, "current: {p50_ms: 40, p95_ms: 20}\n"))
    assert "p95_ms (20.0) is below p50_ms (40.0)" in message
    message = _error(_scenario(tmp_path, "slo: {p50_ms: 40, p99_ms: 20}\n"))
    assert "p99_ms" in message


def test_unknown_enum_value_names_allowed_values(tmp_path: Path) -> None:
    message = _error(_scenario(tmp_path, "traffic: {pattern: wavy}\n"))
    assert "traffic.pattern" in message and "'wavy'" in message
    assert "'steady'" in message and "'spiky'" in message


def test_unknown_key_is_rejected(tmp_path: Path) -> None:
    message = _error(_scenario(tmp_path, "slo: {p95: 10}\n"))
    assert "unknown field 'slo.p95'" in message


def test_wrong_type_is_rejected(tmp_path: Path) -> None:
    message = _error(_scenario(tmp_path, "inputs: {typical: {batch_size: many}}\n"))
    assert "inputs.typical.batch_size" in message and "'many'" in message


def test_missing_trace_file_is_rejected(tmp_path: Path) -> None:
    message = _error(_scenario(tmp_path, "traffic: {pattern: trace, trace: nope.csv}\n"))
    assert "traffic.trace" in message and "nope.csv" in message and "not found" in message


def test_trace_pattern_without_file_is_rejected(tmp_path: Path) -> None:
    assert "traffic.trace" in _error(_scenario(tmp_path, "traffic: {pattern: trace}\n"))


def test_relative_trace_resolved_against_scenario_folder(tmp_path: Path) -> None:
    folder = tmp_path / "scenarios"
    folder.mkdir()
    (folder / "arrivals.csv").write_text("t\n0.0\n")
    scenario = load_scenario(_scenario(folder, "traffic: {pattern: trace, trace: arrivals.csv}\n"))
    assert scenario.traffic.trace == folder / "arrivals.csv"


def test_not_yaml_and_not_a_mapping(tmp_path: Path) -> None:
    assert "not valid YAML" in _error(_scenario(tmp_path, "slo: {p95_ms: [\n"))
    assert "mapping" in _error(_scenario(tmp_path, "- a\n- b\n"))
    with pytest.raises(ConfigError, match="not found"):
        load_scenario(tmp_path / "absent.yaml")


def test_quality_floor_needs_exactly_one_kind(tmp_path: Path) -> None:
    message = _error(_scenario(tmp_path, "constraints: {quality_floor: {metric: acc}}\n"))
    assert "exactly one" in message


def test_missing_facts_of_an_empty_and_a_partial_scenario(tmp_path: Path) -> None:
    assert load_scenario(_scenario(tmp_path, "")).missing_facts() == list(FACTS)
    partial = load_scenario(_scenario(tmp_path, "slo: {p95_ms: 10}\nmodel: {family: cnn}\n"))
    assert partial.missing_facts() == [
        "deployment", "current", "hardware", "inputs", "traffic", "constraints"]


def test_round_trip_to_dict_from_dict() -> None:
    for name in ("minilm-cpu.yaml", "reranker-t4.yaml"):
        scenario = load_scenario(EXAMPLES / name)
        assert Scenario.from_dict(scenario.to_dict()) == scenario


def test_serve_policy_bounds() -> None:
    assert ServePolicy().max_batch_size == 8
    with pytest.raises(ValueError):
        ServePolicy(max_batch_size=0)


def test_not_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"model: {name: caf\xe9}\n")
    assert "not UTF-8" in _error(path)
