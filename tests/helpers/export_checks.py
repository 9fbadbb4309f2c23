"""Checks shared by the export tests: Triton's own ModelConfig protobuf class from the
tritonclient wheel, a stand-in for Triton's ``triton_python_backend_utils`` so the generated
Python-backend models run here, and promtool (never skipped in CI)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import subprocess
import types
from pathlib import Path
from typing import Any

import numpy as np
from services import missing_service


def model_config_class() -> Any:
    """tritonclient ships Triton's model_config.proto compiled as
    tritonclient/grpc/model_config_pb2.py; importing it through the package runs
    tritonclient/grpc/__init__.py, which needs grpcio (the grpc extra, not pinned here), so
    the generated module is loaded from its file."""
    dist = importlib.metadata.distribution("tritonclient")
    rel = next(f for f in dist.files or [] if str(f).endswith("grpc/model_config_pb2.py"))
    spec = importlib.util.spec_from_file_location("triton_model_config_pb2",
                                                  Path(str(dist.locate_file(rel))))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ModelConfig


# --- a stand-in for Triton's Python-backend utilities (only what the generated models use) ---

class _Tensor:
    def __init__(self, name: str, data: np.ndarray) -> None:
        self._name, self._data = name, data

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._data


class _Response:
    def __init__(self, output_tensors: list[_Tensor], error: Any = None) -> None:
        self.outputs = {t.name(): t.as_numpy() for t in output_tensors}
        self.error = error


class _Error:
    def __init__(self, message: str) -> None:
        self.message = message


class Request:
    def __init__(self, **tensors: np.ndarray) -> None:
        self.tensors = {name: _Tensor(name, value) for name, value in tensors.items()}


def stub_module() -> types.ModuleType:
    stub = types.ModuleType("triton_python_backend_utils")
    stub.Tensor = _Tensor  # type: ignore[attr-defined]
    stub.InferenceResponse = _Response  # type: ignore[attr-defined]
    stub.TritonError = _Error  # type: ignore[attr-defined]
    stub.get_input_tensor_by_name = (  # type: ignore[attr-defined]
        lambda request, name: request.tensors.get(name))
    return stub


def promtool_check(path: Path) -> str:
    """`promtool check rules PATH`'s output; fails in CI when promtool is missing."""
    if shutil.which("promtool") is None:
        missing_service("promtool not installed (Debian package prometheus; bash "
                        "scripts/ensure_services.sh)")
    done = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
