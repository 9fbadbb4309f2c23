"""Cascade confidence and tier routing, and the small pure helpers of serve/."""

from __future__ import annotations

import numpy as np
import pytest

from infertune.config import ServePolicy
from infertune.errors import ConfigError
from infertune.serve import server_timing
from infertune.serve.cascade import Cascade, confidence
from infertune.serve.runtime import to_jsonable
from infertune.serve.testing import GatedAdapter
from infertune.serve.warmup import warmup_batches


def test_confidence_by_probability_and_margin() -> None:
    assert confidence([0.7, 0.2, 0.1], "probability") == pytest.approx(0.7)
    assert confidence([0.7, 0.2, 0.1], "margin") == pytest.approx(0.5)
    assert confidence([0.3, 0.9], "probability") is None  # not a distribution
    assert confidence([0.1] * 384, "probability") is None
    assert confidence(0.9, "probability") is None
    assert confidence("text", "margin") is None


def test_tiers_route_between_fast_and_full_models() -> None:
    cascade = Cascade(GatedAdapter(), threshold=0.8, metric="probability")
    outs = [[0.9, 0.1], [0.6, 0.4], [0.5] * 2]
    assert cascade.confident(outs, "standard") == [True, False, False]
    assert cascade.confident(outs, "fast") == [True, True, True]
    assert cascade.uses_fast("standard") and cascade.uses_fast("fast")
    assert not cascade.uses_fast("quality")
    assert not Cascade(GatedAdapter(), threshold=None).uses_fast("standard")
    with pytest.raises(ConfigError, match="cascade_threshold"):
        Cascade(GatedAdapter(), threshold=1.5)


def test_server_timing_header_format() -> None:
    header = server_timing({"queue": 0.0015, "inference": 0.012})
    assert header == ("queue;dur=1.500, preprocess;dur=0.000, inference;dur=12.000, "
                      "postprocess;dur=0.000")


def test_to_jsonable_turns_numpy_into_lists_of_floats() -> None:
    out = to_jsonable([np.array([0.5, 1.0], dtype=np.float32), np.float64(2.0), {"a": np.int64(3)}])
    assert out == [[0.5, 1.0], 2.0, {"a": 3}]
    assert type(out[0][0]) is float and type(out[2]["a"]) is int


def test_warmup_covers_each_bucket_at_batch_one_and_max() -> None:
    batches = warmup_batches(GatedAdapter(), max_batch_size=4)
    assert [len(b) for b in batches] == [1, 4, 1, 4]  # buckets 16 and 64 (the fake's limit)
    assert len(batches[2][0].split()) > len(batches[0][0].split())


def test_policy_round_trip_and_limits() -> None:
    policy = ServePolicy(max_batch_size=16, redis_url="redis://127.0.0.1:6379/0",
                         on_long_input="reject", cascade_threshold=0.9)
    assert ServePolicy.model_validate(policy.model_dump()) == policy
    with pytest.raises(ValueError):
        ServePolicy(on_long_input="drop")
    with pytest.raises(ValueError):
        ServePolicy(max_request_bytes=10)


def test_model_card_shows_the_manifest_and_no_server_path(tmp_path) -> None:
    import dataclasses
    import json

    from infertune.serve.app import model_card

    plain = model_card(GatedAdapter()).model_dump()
    assert plain["id"] == "fake" and plain["manifest"] is None
    assert "source" not in plain and "tokenizer_dir" not in plain
    (tmp_path / "tok").mkdir()
    (tmp_path / "manifest.json").write_text(json.dumps({
        "id": "ort-int8", "runtime": "ort", "tokenizer": str(tmp_path / "tok"),
        "files": ["model.onnx", "C:\\models\\x.onnx"], "source_model": "~/m/model.onnx"}))
    info = dataclasses.replace(GatedAdapter().info, source=str(tmp_path),
                               tokenizer_dir=str(tmp_path / "tok"))
    card = model_card(GatedAdapter(info=info)).model_dump(mode="json")
    assert card["manifest"] == {"id": "ort-int8", "runtime": "ort", "tokenizer": "tok",
                                "files": ["model.onnx", "x.onnx"], "source_model": "model.onnx"}
    assert str(tmp_path) not in json.dumps(card)


def test_cascade_models_reopen_their_onnxruntime_sessions_without_spinning(tmp_path) -> None:
    from onnx_graphs import WIDTH, make_mlp

    from infertune.models import load
    from infertune.serve.cascade import without_spinning

    full = load(make_mlp(tmp_path / "full.onnx"))
    fast = load(make_mlp(tmp_path / "fast.onnx"))
    x = [np.ones(WIDTH, np.float32)]
    expected = full.predict(x)
    full2, fast2 = without_spinning(full, fast)
    for adapter in (full2, fast2):
        options = adapter.runner.session.get_session_options()
        assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
        assert adapter.runner.opened_with["allow_spinning"] is False
    np.testing.assert_allclose(full2.predict(x), expected, rtol=1e-6)  # same model, same answer
    assert full.runner.opened_with.get("allow_spinning", True) is True  # originals untouched
    gated = GatedAdapter()  # a runner that cannot reopen is passed through
    assert without_spinning(gated)[0] is gated
