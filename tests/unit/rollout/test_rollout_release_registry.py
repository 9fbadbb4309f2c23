"""The release registry: immutable records, content-addressed artifacts verified when served,
statuses moved by routing events, the append-only event log, diff and prune."""

from __future__ import annotations

import pytest
from rollout_variants import mlp_run, mlp_variant

from infertune.errors import ConfigError
from infertune.rollout.feedback import FeedbackStore
from infertune.rollout.release_registry import Registry, default_root
from infertune.rollout.stats import Counts
from infertune.serve.routing import FeedbackItem, RoutingEvent, RoutingState


@pytest.fixture
def registry(tmp_path) -> Registry:
    return Registry(tmp_path / "reg")


def test_add_records_the_run_and_shares_equal_artifacts(tmp_path, registry) -> None:
    run = mlp_run(tmp_path / "run", policy={"max_batch_size": 4, "max_wait_ms": 0.5})
    a = registry.add(run, "v1")
    r = a.record
    assert a.status == "registered"
    assert (r.variant_id, r.runtime, r.kind, r.task) == ("ort_fp32", "onnxruntime", "tensor",
                                                          "embedding")
    assert r.policy.max_batch_size == 4 and r.quality_floor.metric == "mean_cosine"
    assert r.scenario_yaml is not None and "mean_cosine" in r.scenario_yaml
    assert (registry.root / "reports" / f"{r.report_sha256}.json").is_file()
    assert "onnxruntime" in r.libraries
    # the bare variant folder, with equal files, lands on the same artifact
    b = registry.add(run / "variants" / "ort_fp32", "v1-copy")
    assert b.record.digest == r.digest and b.record.source_run is None
    assert len(list((registry.root / "artifacts").iterdir())) == 1
    assert registry.verified_path("v1") == registry.root / "artifacts" / r.digest
    assert [x.record.name for x in registry.releases()] == ["v1", "v1-copy"]
    fields = {f for f, _, _ in registry.diff("v1", "v1-copy")}
    assert {"policy.max_batch_size", "source_run", "scenario_yaml"} <= fields
    assert "digest" not in fields


def test_bad_input_gets_one_line_errors(tmp_path, registry) -> None:
    run = mlp_run(tmp_path / "run")
    registry.add(run, "v1")
    with pytest.raises(ConfigError, match="already exists and releases are immutable"):
        registry.add(run, "v1")
    with pytest.raises(ConfigError, match="neither a run folder"):
        registry.add(tmp_path, "v2")
    with pytest.raises(ConfigError, match="variant 'nope' not found"):
        registry.add(run, "v2", variant="nope")
    with pytest.raises(ConfigError, match="names are letters"):
        registry.add(run, "bad name!")
    with pytest.raises(ConfigError, match="no release named 'v9'.*known: v1"):
        registry.get("v9")
    (run / "variants" / "ort_fp32" / "model.onnx").write_bytes(b"tampered")
    with pytest.raises(ConfigError, match="does not match its SHA-256"):
        registry.add(run, "v3")


def test_a_modified_artifact_is_refused_when_served(tmp_path, registry) -> None:
    release = registry.add(mlp_variant(tmp_path / "variants" / "x"), "x")
    (registry.root / "artifacts" / release.record.digest / "model.onnx").write_bytes(b"evil")
    with pytest.raises(ConfigError, match="no longer matches its digest"):
        registry.verified_path("x")


def test_routing_events_move_statuses_and_are_logged(tmp_path, registry) -> None:
    for name, noise in (("a", 0.0), ("b", 1.0), ("c", 0.5)):
        registry.add(mlp_variant(tmp_path / "v" / name, noise=noise), name)
    state = RoutingState(stable="a", canary="b", canary_weight=5)
    registry.record_event(RoutingEvent(1.0, "start", state))
    assert (registry.get("a").status, registry.get("b").status) == ("stable", "canary")
    rolled = RoutingState(stable="a")
    registry.record_event(RoutingEvent(2.0, "rollback", rolled, "agreement failed", "b"))
    assert registry.get("b").status == "rolled_back"
    assert registry.get("b").status_reason == "agreement failed"
    registry.record_event(RoutingEvent(3.0, "canary", RoutingState(stable="a", canary="c"),
                                       subject="c"))
    registry.record_event(RoutingEvent(4.0, "promote", RoutingState(stable="c",
                                                                    previous_stable="a"),
                                       "all gates passed", "c"))
    assert [registry.get(n).status for n in "abc"] == ["retired", "rolled_back", "stable"]
    registry.record_event(RoutingEvent(4.5, "rollback", RoutingState(stable="a"), "manual",
                                       "c"))
    assert [registry.get(n).status for n in "ac"] == ["stable", "rolled_back"]
    registry.record_event(RoutingEvent(4.6, "promote", RoutingState(stable="c",
                                                                    previous_stable="a"),
                                       "again", "c"))
    kinds = [e.kind for e in registry.events() if e.kind.startswith("routing:")]
    assert kinds == ["routing:start", "routing:rollback", "routing:canary", "routing:promote",
                     "routing:rollback", "routing:promote"]
    assert [e.time for e in registry.events() if e.kind.startswith("routing:")] == [
        1, 2, 3, 4, 4.5, 4.6]
    # prune drops the rolled-back release and its unshared artifact; keeps the retired one
    assert registry.prune(keep_retired=1) == ["b"]
    assert {r.record.name for r in registry.releases()} == {"a", "c"}
    assert len(list((registry.root / "artifacts").iterdir())) == 2
    assert any(e.kind == "prune" and e.release == "b" for e in registry.events())


def test_feedback_is_stored_per_release(registry) -> None:
    store = FeedbackStore(registry)
    for i, (release, value) in enumerate([("a", 1), ("a", 0), ("b", 1), ("a", 1)]):
        store.record_feedback(FeedbackItem(f"r{i}", release, None, "conversion", value, 1.0))
    assert store.counts("conversion") == {"a": Counts(3, 2), "b": Counts(1, 1)}
    assert store.metrics() == ["conversion"]


def test_default_root_follows_the_environment(tmp_path) -> None:
    assert default_root({"INFERTUNE_REGISTRY": str(tmp_path)}) == tmp_path
    assert default_root({"XDG_DATA_HOME": "/x"}).as_posix() == "/x/infertune/registry"
