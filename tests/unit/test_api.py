"""The public Python API (infertune.api, in cli/api.py): cheap to import, the names the package
re-exports, and options checked when they are built; advise end to end (it measures nothing).
The docs page's example, which optimizes, serves and load-tests, runs in
tests/integration/test_python_api_example.py."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import infertune
from infertune import api
from infertune.config import ServePolicy
from infertune.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scenarios"


def _loaded_after(code: str) -> list[str]:
    probe = (f"import sys; {code}; print(' '.join(m for m in ('numpy', 'onnx', 'onnxruntime', "
             "'torch', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    return done.stdout.split()


def test_importing_infertune_imports_nothing_heavy() -> None:
    assert _loaded_after("import infertune") == []


def test_the_api_loads_no_model_runtime() -> None:
    assert _loaded_after("from infertune import api") == ["numpy"]  # the command layer's


def test_the_package_re_exports_the_names_no_subpackage_holds() -> None:
    assert infertune.api is api
    assert infertune.advise is api.advise
    assert infertune.loadtest is api.loadtest
    assert infertune.OptimizeOptions is api.OptimizeOptions
    # the stage packages keep their names; the verbs are api.optimize and api.serve
    assert importlib.import_module("infertune.optimize").__name__ == "infertune.optimize"
    serve_package = importlib.import_module("infertune.serve")
    assert infertune.serve is serve_package
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = infertune.nothing  # type: ignore[attr-defined]


def test_options_are_checked_when_built(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="scenario .* not found"):
        api.OptimizeOptions(model="model.onnx", scenario=tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="port must be in 0..65535"):
        api.ServeOptions("runs/x", port=70000)
    with pytest.raises(ConfigError, match="needs a target"):
        api.LoadtestOptions("")
    assert api.LoadtestOptions("http://127.0.0.1:1/v1/predict").schedule.rate == 10.0


def test_a_budget_below_the_minimum_fails_before_anything_runs(tmp_path: Path) -> None:
    options = api.OptimizeOptions(model="minilm", scenario=EXAMPLES / "minilm-cpu.yaml",
                                  out=tmp_path / "run", budget=10)
    with pytest.raises(ConfigError, match="too small to measure anything"):
        api.optimize(options)
    assert not (tmp_path / "run").exists()


def test_advise_returns_the_typed_report_the_command_renders() -> None:
    report = api.advise(EXAMPLES / "minilm-cpu.yaml")
    assert report.kind == "advice"
    assert report.options and all(o.source for o in report.options)
    assert api.advise(api.AdviseOptions(EXAMPLES / "minilm-cpu.yaml")) == report


def test_vague_facts_become_assumptions(tmp_path: Path) -> None:
    scenario = tmp_path / "vague.yaml"
    scenario.write_text((EXAMPLES / "cpu-by-size.yaml").read_text())
    report = api.advise(scenario)
    assert report.assumptions  # the CPU given by its size, read as a generic one


def test_serve_policy_overrides_are_the_fields_set() -> None:
    options = api.ServeOptions("runs/x", policy=ServePolicy(max_batch_size=16))
    assert options.policy is not None
    assert options.policy.model_dump(exclude_unset=True) == {"max_batch_size": 16}
