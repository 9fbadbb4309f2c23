"""Live drift: the PSI formula, the reference fixed from the first rows, a shifted window
flagged and an unshifted one not, constant features and unreadable rows skipped."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infertune.serve.live_drift import ALERT_PSI, DriftMonitor, psi


def test_psi_formula() -> None:
    r, w = np.array([0.5, 0.5]), np.array([0.25, 0.75])
    assert psi(r, w) == pytest.approx(-0.25 * math.log(0.5) + 0.25 * math.log(1.5))
    assert psi(r, r) == 0.0
    # an empty bin is floored at 1e-4, not infinite
    assert math.isfinite(psi(np.array([1.0, 0.0]), np.array([0.0, 1.0])))


def _rows(rng: np.random.Generator, n: int, mean: float) -> list[list[float]]:
    return rng.normal(mean, 1.0, size=(n, 8)).round(4).tolist()


def test_a_shifted_window_is_flagged_and_an_unshifted_one_is_not() -> None:
    published: dict[str, float] = {}
    monitor = DriftMonitor(published.__setitem__, reference_rows=200, window_rows=200,
                           every=20)
    rng = np.random.default_rng(0)
    reference = _rows(rng, 200, 0.0)
    monitor.observe(reference, reference)  # outputs: the rows themselves
    assert published == {}  # the reference is fixed, nothing to compare yet
    same = _rows(rng, 200, 0.0)
    monitor.observe(same, same)
    assert set(published) == {"input_mean", "output_norm"}  # input_size is constant: no PSI
    assert max(published.values()) < 0.1
    shifted = _rows(rng, 200, 1.0)
    monitor.observe(shifted, shifted)
    assert published["input_mean"] > ALERT_PSI and published["output_norm"] > ALERT_PSI


def test_text_lengths_and_unreadable_rows() -> None:
    published: dict[str, float] = {}
    monitor = DriftMonitor(published.__setitem__, reference_rows=50, window_rows=50, every=10)
    rng = np.random.default_rng(1)
    short = ["x" * int(n) for n in rng.integers(5, 30, 50)]
    monitor.observe(short, [[1.0, 0.0]] * 50)
    monitor.observe(["y" * 200] * 50, [{"label": "a"}] * 50)  # outputs without numbers
    assert published["input_size"] > ALERT_PSI and "output_norm" not in published
    monitor.observe([None, object()], [None, "text"])  # skipped, never an error


def test_cache_hits_stay_out_of_the_model_latency_histogram_and_drift_shows() -> None:
    from prometheus_client.parser import text_string_to_metric_families
    from starlette.testclient import TestClient

    from infertune.config import ServePolicy
    from infertune.rollout.observe import parse_exposition
    from infertune.serve.app import create_app
    from infertune.serve.testing import GatedAdapter

    app = create_app(GatedAdapter(), ServePolicy(max_wait_ms=0))
    with TestClient(app) as client:
        for text in ("alpha", "beta", "alpha", "alpha"):  # two of them answered from cache
            assert client.post("/v1/predict", json={"inputs": [text]}).status_code == 200
        exposition = client.get("/metrics").text
    counts = {s.name: s.value for f in text_string_to_metric_families(exposition)
              for s in f.samples if s.name.endswith("request_seconds_count")}
    assert counts == {"infertune_request_seconds_count": 4.0,
                      "infertune_model_request_seconds_count": 2.0}
    # the gates read the model-answer histogram when a server exports one, labelled per
    # release by the router; a server without it falls back to all answers
    labelled = "\n".join(line.replace("{", '{release="a",', 1) if "_bucket{" in line else line
                         for line in exposition.splitlines()) + "\n"
    assert parse_exposition(labelled).of("a").buckets[math.inf] == 2.0
    without = "\n".join(line for line in labelled.splitlines()
                        if "model_request_seconds" not in line) + "\n"
    assert parse_exposition(without).of("a").buckets[math.inf] == 4.0
