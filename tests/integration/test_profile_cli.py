"""`infertune profile minilm` end to end on the real model, with small settings."""

import json

import pytest

from infertune.cli import main


@pytest.mark.slow
@pytest.mark.timing_free
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
    _assert_padding_is_recomputed_from_the_data(data["padding"])
    dominant = stages["dominant_p50"]
    assert f"{dominant} dominates p50" in captured.out


def _assert_padding_is_recomputed_from_the_data(padding: dict) -> None:
    """The bundled held-out set, cut in file order into batches of the typical size (8), each
    padded to its longest: real and padded token counts recomputed here from the tokenizer."""
    from infertune.data import default_heldout
    from infertune.models import load

    adapter = load("minilm")
    pre = adapter.pre
    lengths = [min(n, pre.max_length) for n in adapter.token_lengths(default_heldout().inputs)]
    batches = [lengths[i:i + 8] for i in range(0, len(lengths), 8)]
    real = sum(lengths)
    padded = sum(len(b) * pre.padded_length(max(b)) for b in batches)
    assert (padding["batch_size"], padding["batches"]) == (8, len(batches))
    assert (padding["real_tokens"], padding["padded_tokens"]) == (real, padded)
    assert padding["waste_percent"] == pytest.approx(100 * (1 - real / padded))
