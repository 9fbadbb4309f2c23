"""Intra-op threads per worker (serve/worker_threads.py): several workers sharing an
onnxruntime session split the cores between them, a variant's own setting wins, and one
worker keeps the session as loaded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx_graphs import WIDTH, make_mlp

from infertune.config import ServePolicy
from infertune.models.loaders import load_onnx
from infertune.serve.worker_threads import fit_to_workers, threads_per_worker


def test_the_rule_variant_first_then_the_policy_then_cores_over_workers() -> None:
    assert threads_per_worker(0, ServePolicy(workers=2), cores=2) == 1
    assert threads_per_worker(0, ServePolicy(workers=2), cores=8) == 4
    assert threads_per_worker(0, ServePolicy(workers=4), cores=2) == 1  # never below one
    assert threads_per_worker(0, ServePolicy(workers=2, model_threads=3), cores=2) == 3
    assert threads_per_worker(2, ServePolicy(workers=2, model_threads=3), cores=2) == 2


def test_two_workers_get_a_session_with_half_the_cores_each(tmp_path: Path) -> None:
    adapter = load_onnx(make_mlp(tmp_path / "mlp.onnx"))
    x = np.random.default_rng(0).standard_normal((3, WIDTH)).astype(np.float32)
    expected = adapter.predict(list(x))
    one, threads = fit_to_workers(adapter, ServePolicy(workers=1), cores=2)
    assert one is adapter and threads is None  # as loaded: the runtime's one per core
    two, threads = fit_to_workers(adapter, ServePolicy(workers=2), cores=2)
    assert threads == 1 and two is not adapter
    assert two.runner.opened_with["intra_op_threads"] == 1
    assert two.info.version == adapter.info.version  # the same model, served as reported
    assert np.allclose(np.asarray(two.predict(list(x))), np.asarray(expected), atol=1e-6)
    # a session already sized as the rule asks is kept
    again, threads = fit_to_workers(two, ServePolicy(workers=2), cores=2)
    assert again is two and threads == 1
    # a variant's fixed setting wins over the split (the search measured it that way)
    fixed = adapter.with_runner(adapter.runner.reopen(intra_op_threads=2))
    kept, threads = fit_to_workers(fixed, ServePolicy(workers=2), cores=2)
    assert kept is fixed and threads == 2
