"""Checks on a finished `optimize` run folder that can fail: the recommendation follows the
run's own measurements (read back from run.json), whichever variant wins on this machine.

The variant a run recommends depends on the CPU (INT8 wins on one, loses on another), so a
test cannot name it; it can hold the run to its own rule instead: a recommended variant passes
the quality floor and was measurably faster than the baseline, and the baseline is kept only
when no surviving variant was both, with the reason that says which of the two failed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from infertune.optimize.record import RunRecord
from infertune.optimize.search.timing import Candidate

KEEP_NO_PASS = "no variant met the quality floor"
KEEP_NOT_FASTER = "no variant that meets the quality floor was measurably faster"


def eligible(c: Candidate) -> bool:
    t = c.best_timing
    return (c.quality_verdict == "pass" and t is not None and t.measurably_faster
            and not c.dropped and not c.is_baseline)


def assert_recommendation_follows_the_measurements(out: Path, report: dict[str, Any]) -> str:
    """The recommended variant id (or the baseline's), checked against run.json."""
    run = RunRecord.load(out)
    ok = {c.variant_id for c in run.screen.candidates if eligible(c)}
    rec = report["recommendation"]
    vid = rec["variant_id"]
    if rec["title"] == "Keep the baseline model":
        assert not ok, f"the baseline was kept though {sorted(ok)} passed and were faster"
        passing = [c for c in run.screen.candidates if c.quality_verdict == "pass"
                   and not c.is_baseline]
        expected = KEEP_NOT_FASTER if passing else KEEP_NO_PASS
        assert rec["reason"].startswith(expected), (expected, rec["reason"])
        return str(vid)
    assert vid in ok, f"{vid} recommended, but only {sorted(ok)} passed and were faster"
    chosen = next(c for c in run.screen.candidates if c.variant_id == vid)
    assert f"({chosen.quality_verdict})" in rec["reason"]
    return str(vid)


def assert_judged_or_stopped(out: Path, report: dict[str, Any], vid: str) -> str:
    """A built variant was screened: its quality was judged and passes, or screening stopped
    timing it as a clear loser on speed (which CPU it loses on varies), and then run.json, the
    variants table and the notes all say so: the candidate was dropped by the stop rule with
    its quick timing kept, its quality never judged (no quality.json, verdict unknown) and a
    note names the stop. On a machine too slow for the budget to reach it, it is not built,
    and run.json's skipped list says so with the time it needed. Returns "judged", "stopped"
    or "not built"."""
    run = RunRecord.load(out)
    rows = {r["variant_id"]: r for r in report["variants"]}
    if vid not in rows:
        assert not (out / "variants" / vid).exists()
        assert all(c.variant_id != vid for c in run.screen.candidates)
        reasons = [s.reason for s in run.log.skipped if s.what == f"variant {vid}"]
        assert len(reasons) == 1 and reasons[0].startswith("not built"), run.log.skipped
        return "not built"
    verdict = rows[vid]["quality_verdict"]
    cand = next(c for c in run.screen.candidates if c.variant_id == vid)
    judged = out / "variants" / vid / "quality.json"
    if cand.dropped.startswith("stopped after"):
        assert cand.quick is not None and cand.quality_verdict == "unknown"
        assert verdict == "unknown" and not judged.is_file()
        assert any(f"quality of {vid} (not judged: stopped after" in str(note)
                   for note in report["notes"]), report["notes"]
        return "stopped"
    assert verdict == cand.quality_verdict == "pass", (verdict, cand.dropped)
    assert json.loads(judged.read_text())["verdict"] == "pass"
    return "judged"
