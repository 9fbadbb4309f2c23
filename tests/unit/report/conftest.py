"""Fixtures for the report tests: scenario files written by the tests, and a measured report
shaped like the one optimize writes (built in report_samples.py)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from infertune.report.schema import Report


def load_samples():  # type: ignore[no-untyped-def]
    """report_samples.py by path, so the integration test can share it without packages."""
    path = Path(__file__).with_name("report_samples.py")
    spec = importlib.util.spec_from_file_location("infertune_report_samples", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.fixture
def write_scenario(tmp_path: Path) -> Callable[[dict, str], Path]:
    def write(data: dict, name: str = "scenario.yaml") -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data))
        return path
    return write


@pytest.fixture
def measured_report() -> Report:
    return load_samples().build_measured_report()
