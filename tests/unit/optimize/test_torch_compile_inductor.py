"""The real torch.compile build (inductor, C++ code generated and compiled on this CPU) on the
tiny BERT: the unit tests use the 'eager' backend for speed, so this is where the pass's
inductor path is proven to build, load and agree with the eager model."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_profiles import this_cpu
from optimize_tiny_helpers import SENTENCES, make_tiny_bert

from infertune.models import load
from infertune.optimize import PassContext, QualityTarget, build_variants
from infertune.optimize.search.builder import registry

pytestmark = [pytest.mark.slow, pytest.mark.timing_free]


@pytest.mark.timeout(600)
def test_inductor_build_loads_and_agrees_with_eager(tmp_path) -> None:
    baseline = load(make_tiny_bert(tmp_path / "bert"), task="embedding")
    hw = this_cpu()
    assert hw.cxx_compiler, "inductor on CPU needs g++; the python machine image ships it"
    ctx = PassContext(baseline, hw, tmp_path / "variants", SENTENCES,
                      quality=QualityTarget(min_mean_cosine=0.99))
    results = {r.pass_name: r for r in build_variants(baseline, ctx, names=["torch_compile"],
                                                      registry=registry())}
    compiled = results["torch_compile"]
    assert compiled.built, compiled.reason
    manifest = compiled.manifest
    assert manifest.recipe.compile and manifest.recipe.compile_backend == "inductor"
    assert manifest.first_call_s is not None and manifest.first_call_s > 0
    # inductor reorders float reductions: close to eager, not bit-exact
    assert manifest.agreement.mean_cosine > 0.9999
    expected = np.stack(baseline.predict(SENTENCES[:4]))
    assert np.allclose(np.stack(load(compiled.path).predict(SENTENCES[:4])), expected,
                       atol=1e-4)
