"""Checks on a finished `optimize` run folder that can fail: the recommendation follows the
run's own measurements (read back from run.json), whichever variant wins on this machine.

The variant a run recommends depends on the CPU (INT8 wins on one, loses on another), so a
test cannot name it; it can hold the run to its own rule instead: a recommended variant passes
the quality floor and was measurably faster than the baseline, and the baseline is kept only
when no surviving variant was both, with the reason that says which of the two failed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infertune.optimize.record import RunRecord
from infertune.optimize.search import Candidate

KEEP_NO_PASS = "no variant met the quality floor"
KEEP_NOT_FASTER = "no variant that meets the quality floor was measurably faster"


def eligible(c: Candidate) -> bool:
    t = c.best_timing
    return (c.quality_verdict == "pass" and t is not None and t.measurably_faster
            and not c.dropped and not c.is_baseline)


def assert_recommendation_follows_the_measurements(out: Path, report: dict[str, Any]) -> str:
    """The recommended variant id (or the baseline's), checked against run.json."""
    run = RunRecord.load(out)
    ok = {c.variant_id for c in run.candidates if eligible(c)}
    rec = report["recommendation"]
    vid = rec["variant_id"]
    if rec["title"] == "Keep the baseline model":
        assert not ok, f"the baseline was kept though {sorted(ok)} passed and were faster"
        passing = [c for c in run.candidates if c.quality_verdict == "pass"
                   and not c.is_baseline]
        expected = KEEP_NOT_FASTER if passing else KEEP_NO_PASS
        assert rec["reason"].startswith(expected), (expected, rec["reason"])
        return str(vid)
    assert vid in ok, f"{vid} recommended, but only {sorted(ok)} passed and were faster"
    chosen = next(c for c in run.candidates if c.variant_id == vid)
    assert f"({chosen.quality_verdict})" in rec["reason"]
    return str(vid)
