"""Fixtures for the export tests: tiny run folders (tests/helpers/export_run.py) and the
generated Python-backend models loaded with a stand-in for Triton's utilities."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
from export_checks import stub_module
from export_run import make_run


@pytest.fixture(scope="session")
def text_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("text_run"), kind="text")


@pytest.fixture(scope="session")
def tensor_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("tensor_run"), kind="tensor", vid="ort_fp32")


@pytest.fixture
def load_python_model(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Import a generated ``<model>/1/model.py`` with the stand-in utilities; returns an
    initialised TritonPythonModel."""
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", stub_module())

    def load(model_dir: Path) -> Any:
        spec = importlib.util.spec_from_file_location(f"model_{model_dir.name}",
                                                      model_dir / "1" / "model.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        model = module.TritonPythonModel()
        model.initialize({"model_repository": str(model_dir), "model_version": "1",
                          "model_config": "{}"})
        return model

    return load
