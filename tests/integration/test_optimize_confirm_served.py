"""`infertune optimize` on a tiny BERT (random weights, built here): the recommendation's
figures come from the finalists each run by `infertune serve` in its own process, driven over
HTTP in ABBA order, and the served configuration is exactly the one report.json names."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from test_optimize_tiny import WORDS, _scenario, _tiny_bert

from infertune.cli import main
from infertune.config import ServePolicy
from infertune.optimize.served.policy_sweep import SHED_LIMIT

pytestmark = pytest.mark.slow  # one optimize run with two serve processes, ~1-2 minutes


def _data(root: Path) -> Path:
    rng = random.Random(0)
    lines = [json.dumps({"input": " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 14)))})
             for _ in range(60)]
    path = root / "data.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_recommendation_is_measured_as_served_in_its_own_process(tmp_path: Path) -> None:
    model = _tiny_bert(tmp_path / "model")
    out = tmp_path / "run"
    assert main(["optimize", str(model), "--scenario", str(_scenario(tmp_path, "plain")),
                 "--data", str(_data(tmp_path)), "--quick", "--budget", "180s",
                 "--out", str(out)]) == 0
    record = json.loads((out / "run.json").read_text())
    conf = record["confirm"]["confirmation"]  # run.json v2: findings under their stage
    assert conf is not None, record["log"]["skipped"]
    # the optimizer is only the client: each finalist ran in a serve process of its own
    assert conf["optimizer_pid"] == os.getpid()
    arms = [a for a in conf["arms"] if a["error"] is None]
    assert len(arms) == 2, conf["notes"]
    pids = [a["pid"] for a in arms]
    assert len(set(pids)) == 2 and os.getpid() not in pids
    a, b = (f"{x['variant_id']}/{x['policy_id']}" for x in arms)
    assert a != b and conf["order"] == [a, b, b, a]
    # each rate's segment sized for a decision (p99: 3,000 requests) within the budget left,
    # never under the quick minimum of 2.5 s, never past half the decisive run
    decisive = conf["decisive"]
    assert {k: decisive[k]["requests"] for k in ("mean", "peak")} == {"mean": 3000,
                                                                      "peak": 3000}
    for label in ("mean", "peak"):
        assert 2.5 <= conf["seconds_at"][label] <= decisive[label]["duration_s"] / 2 + 0.05
    # the winner alone may be extended where the budget left holds what would decide it
    paid = {e["label"]: e["seconds"] for e in conf["extensions"] if e["paid"]}
    assert all(e["verdict_before"] == "not shown" for e in conf["extensions"] if e["paid"])
    for arm in arms:  # two segments per rate pooled
        assert arm["segments"] == 2
        won = f"{arm['variant_id']}/{arm['policy_id']}" == conf["winner"]
        for label, rate in (("mean", 20), ("peak", 60)):
            sent = arm["at"][label]["stats"]["requests"]
            want = rate * (2 * conf["seconds_at"][label] + (paid.get(label, 0.0) if won else 0))
            assert 0.5 * want <= sent <= 1.5 * want, (label, sent, want)
            assert set(arm["at"][label]["intervals"]) == {"p50", "p95", "p99"}
    # the winner is what report.json recommends and `infertune serve <run>` runs
    report = json.loads((out / "report.json").read_text())
    serving = report["serving"]
    assert conf["winner"] == f"{serving['variant_id']}/{serving['policy_id']}"
    winner = next(x for x in arms if f"{x['variant_id']}/{x['policy_id']}" == conf["winner"])
    assert winner["effective_policy"] == ServePolicy(**serving["policy"]).model_dump(mode="json")
    # every measured figure of the recommendation at the SLO is the confirmation's
    check = report["slo_check"]
    assert check["variant_id"] == winner["variant_id"]
    for point in check["points"]:
        pooled = winner["at"][point["label"]]["stats"]
        for key in ("p50", "p95", "p99"):
            fig = point["measured"][key]
            assert fig["value"] == round(pooled[f"{key}_ms"], 3)
            assert f"own process (infertune serve, pid {winner['pid']}" in fig["basis"]
            assert "ABBA" in fig["basis"] and fig["samples"] == pooled["requests"]
        assert point["shed"]["value"] == round(pooled["shed"] * 100, 2)
        # each SLO percentile's verdict from its interval, as the confirmation measured it
        intervals = winner["at"][point["label"]]["intervals"]
        assert [c["key"] for c in point["checks"]] == list(check["targets"])
        for c in point["checks"]:
            assert c["samples"] == intervals[c["key"]]["samples"]
            assert c["artifact"] == "confirm/confirmation.json"
            low, high = c.get("low"), c.get("high")
            assert c["verdict"] == ("misses" if low is not None and low > c["target_ms"]
                                    and c["blocks"] >= 10 else
                                    "meets" if high is not None and high <= c["target_ms"]
                                    and c["blocks"] >= 10 else "not shown")
        # the point's verdict from its checks: a miss (or over 1% shed) decides it, meets
        # needs every percentile to meet, anything else is not shown
        verdicts = [c["verdict"] for c in point["checks"]]
        assert point["verdict"] == (
            "misses" if point["shed"]["value"] > SHED_LIMIT * 100 or "misses" in verdicts else
            "meets" if verdicts and all(v == "meets" for v in verdicts) else "not shown")
        assert (point.get("goodput") is not None) == (point["verdict"] == "meets")
        if point["verdict"] == "not shown":
            assert point["decisive_run"].startswith("3,000 requests over")
        if point.get("goodput") is not None:
            assert "own process" in point["goodput"]["basis"]
    assert (out / "confirm" / "confirmation.json").is_file()
