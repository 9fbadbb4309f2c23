"""docs/adding-a-pass.md, done as the page says: its module, dropped into the passes package,
is imported with the others and registers its pass, which the plans, doctor and the builder
then pick up with no other edit."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from guide_files import marked_block
from onnx_graphs import make_mlp

import infertune.optimize.passes as passes
from infertune.hardware import detect
from infertune.models import load
from infertune.optimize.passes import PassContext, build_variants, create_pass
from infertune.optimize.passes.registry import REGISTRY, engines_on
from infertune.optimize.search.builder import planned

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "adding-a-pass.md"
NAME = "ort_graph_disabled"


@pytest.fixture
def added_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The page's module saved as passes/ort_graph_disabled.py (in a folder added to the
    package's path, so src/ stays as it is) and the package's import of its modules rerun;
    the registry and sys.modules are restored afterwards."""
    folder = tmp_path / "passes"
    folder.mkdir()
    (folder / f"{NAME}.py").write_text(marked_block(PAGE, "pass-module"))
    monkeypatch.setattr(REGISTRY, "_entries", dict(REGISTRY._entries))
    monkeypatch.setattr(passes, "__path__", [*passes.__path__, str(folder)])
    module = f"infertune.optimize.passes.{NAME}"
    monkeypatch.delitem(sys.modules, module, raising=False)
    assert NAME not in REGISTRY
    passes._import_pass_modules()
    yield NAME
    sys.modules.pop(module, None)


def test_the_pass_is_registered_with_its_facts(added_pass: str) -> None:
    facts = REGISTRY.facts(added_pass)
    assert (facts.runtime, facts.precision) == ("onnxruntime", "fp32")
    assert create_pass(added_pass).name == added_pass
    assert added_pass in planned("tensor", full=True)
    assert added_pass not in planned("tensor", full=False)  # the full plan only
    assert added_pass not in planned("text", full=True)


def test_doctor_lists_it(added_pass: str) -> None:
    verdicts = engines_on(detect(with_gpus=False))
    ort_fp32 = next(v for v in verdicts if v.engine == "ONNX Runtime fp32")
    assert added_pass in ort_fp32.passes


def test_the_builder_builds_it_on_an_onnx_model(added_pass: str, tmp_path: Path) -> None:
    baseline = load(make_mlp(tmp_path / "mlp.onnx"))
    ctx = PassContext(baseline, detect(with_gpus=False), tmp_path / "variants")
    results = {r.pass_name: r for r in build_variants(baseline, ctx, names=[added_pass])}
    assert list(results) == ["ort_fp32", added_pass]  # its source first
    built = results[added_pass]
    assert built.status == "built", built.reason
    assert built.path is not None and built.manifest is not None
    assert load(built.path).info.runtime == "onnxruntime"
    manifest = built.manifest
    assert manifest.threads.graph_level == "disabled"
    assert manifest.passes[-1].settings == {"graph_optimization_level": "disabled"}
