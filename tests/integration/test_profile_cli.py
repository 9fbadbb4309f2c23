"""`infertune profile minilm` end to end on the real model, with small settings."""

import json

import pytest

from infertune.cli import main


@pytest.mark.slow
def test_profile_minilm_writes_everything(capsys, tmp_path) -> None:
    out = tmp_path / "profile.json"
    rc = main(["profile", "minilm", "--quick", "--batch-sizes", "1,4", "--requests", "60",
               "--json", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    data = json.loads(out.read_text())
    assert data["schema"] == "infertune.profile/v1"
    assert data["model"]["id"] == "minilm"
    assert data["data_source"].endswith("minilm_heldout.jsonl")

    stages = data["stages"]
    for name in ("preprocess", "forward", "postprocess", "e2e"):
        pcts = stages["summaries"][name]["percentiles"]
        assert {"p50", "p95", "p99"} <= set(pcts)
        assert stages["summaries"][name]["count"] == 60
    assert sum(stages["share_p50_percent"].values()) == pytest.approx(100.0)
    assert sum(stages["share_p99_percent"].values()) == pytest.approx(100.0)

    points = data["curve"]["points"]
    assert {p["batch_size"] for p in points} == {1, 4}
    assert all(p["seq_len"] is not None and p["p50_ms"] > 0 for p in points)
    cold = data["cold_start"]
    assert cold["import_s"] > 0 and cold["load_s"] > 0 and cold["first_inference_ms"] > 0
    assert data["utilisation"]["samples"] >= 1 and data["utilisation"]["peak_rss_mb"] > 100
    assert len(data["hotspots"]["ops"]) >= 5
    assert data["hotspots"]["tool"] == "torch.profiler"
    assert 0 <= data["padding"]["waste_percent"] < 100
    dominant = stages["dominant_p50"]
    assert f"{dominant} dominates p50" in captured.out
