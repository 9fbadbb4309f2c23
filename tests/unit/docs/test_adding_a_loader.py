"""docs/adding-a-model-loader.md, done as the page says: its module, importable from the
working directory, is loaded by the entry-point reference `my_models:mlp`; the passes build
on it, and a factory that returns the wrong thing fails with the one-line ModelLoadError."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from guide_files import marked_block

from infertune.errors import ModelLoadError
from infertune.hardware import detect
from infertune.models import load
from infertune.optimize.passes import PassContext, build_variants

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "adding-a-model-loader.md"


@pytest.fixture
def my_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "my_models.py").write_text(marked_block(PAGE, "loader-module"))
    monkeypatch.syspath_prepend(str(tmp_path))  # as PYTHONPATH=. does for the commands
    monkeypatch.delitem(sys.modules, "my_models", raising=False)
    yield tmp_path
    sys.modules.pop("my_models", None)


def test_the_entry_point_loads_as_a_tensor_model(my_models: Path) -> None:
    adapter = load("my_models:mlp")
    assert (adapter.info.kind, adapter.info.runtime) == ("tensor", "torch")
    assert adapter.info.source == "my_models:mlp"
    outputs = adapter.predict([np.zeros(16, np.float32), np.ones(16, np.float32)])
    assert [np.asarray(o).shape for o in outputs] == [(8,), (8,)]


def test_the_onnxruntime_passes_build_on_its_export(my_models: Path) -> None:
    baseline = load("my_models:mlp")
    ctx = PassContext(baseline, detect(with_gpus=False), my_models / "variants")
    (built,) = build_variants(baseline, ctx, names=["ort_fp32"])
    assert built.status == "built", built.reason
    assert built.path is not None
    exported = load(built.path)
    assert exported.info.runtime == "onnxruntime"
    example = [np.linspace(-1, 1, 16, dtype=np.float32)]
    np.testing.assert_allclose(exported.predict(example)[0], baseline.predict(example)[0],
                               rtol=1e-4, atol=1e-5)


def test_a_factory_returning_the_wrong_thing_is_a_one_line_error(my_models: Path) -> None:
    (my_models / "my_models.py").write_text("def mlp():\n    return 42\n")
    with pytest.raises(ModelLoadError, match=r"must return \(nn.Module, example_input\)"):
        load("my_models:mlp")
