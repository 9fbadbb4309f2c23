"""confirm() honours the scenario's cost ceiling: of finalists whose measured goodputs tie
(within 2%), one whose cost per 1,000 requests is over the ceiling never wins over one that
fits it, even where the tie would otherwise go to it by risk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from infertune.loadgen.result import RequestRecord
from infertune.loadgen.schedules import Schedule, ScheduleSpec
from infertune.optimize.served.ceiling import fits_ceiling
from infertune.optimize.served.confirm import (
    Confirmation,
    Finalist,
    Segment,
    ServedProcess,
    confirm,
    served_goodput,
)
from infertune.serve.openapi import ConfigBody, ModelRef

SLO = {"p95": 50.0, "p99": 80.0}
HOURLY = 0.36  # cost per 1k = 0.1 / goodput


class _Ready(ServedProcess):
    """A served process that starts no server and is ready at once."""

    def start(self) -> None:
        self.proc = None

    def wait_ready(self, timeout_s: float) -> ConfigBody:
        return ConfigBody(model=ModelRef(id=self.finalist.variant_id, version="1"),
                          policy=self.finalist.policy, default_deadline_ms=None,
                          worker_kind="thread")

    def stop(self) -> None:
        return None


def _schedule() -> Schedule:
    offsets = np.arange(0.0, 20.0, 0.1)  # 200 requests at 10 req/s
    return Schedule(ScheduleSpec("constant", rate=10.0, duration_s=20.0), offsets, 20.0)


def _confirm(tmp_path: Path, ceiling: float | None) -> Confirmation:
    """fp32 (risk 0) sheds 1 request a segment, 2 of its 400 at each rate (0.5%: it still
    meets the SLO),
    int8 (risk 1) none: goodputs within 2%, so without a ceiling the lower risk wins."""
    finals = [Finalist("int8", "b4", {"max_batch_size": 4}, tmp_path / "int8"),
              Finalist("fp32", "b1", {"max_batch_size": 1}, tmp_path / "fp32")]
    urls: list[str] = []

    def drive(url: str, schedule: Schedule, bodies: list[dict[str, Any]],
              timeout_s: float) -> Segment:
        urls.extend([url] if url not in urls else [])
        statuses = ["200"] * len(schedule)
        if urls.index(url) == 1:  # ABBA: int8 is driven first, fp32 second
            statuses[0] = "503"
        records = [RequestRecord(i, i * 0.1, i * 0.1, i * 0.1 + 0.010, st)
                   for i, st in enumerate(statuses)]
        return Segment(records, schedule.duration_s)

    rates = [("mean", 10.0, _schedule()), ("peak", 10.0, _schedule())]
    bodies: dict[str, list[dict[str, Any]]] = {"mean": [{}] * 400, "peak": [{}] * 400}
    return confirm(finals, rates, bodies, workdir=tmp_path, slo=SLO, cost_per_hour_usd=HOURLY,
                   risk=lambda v: 0 if v == "fp32" else 1, start_timeout_s=1.0,
                   launch=_Ready, drive_segment=drive, cost_ceiling_usd_per_1k=ceiling)


def test_a_finalist_over_the_ceiling_never_wins_over_one_that_fits(tmp_path: Path) -> None:
    free = _confirm(tmp_path, None)
    good = {a.key: served_goodput(a, SLO) for a in free.arms}
    assert good["fp32/b1"] < good["int8/b4"] <= good["fp32/b1"] * 1.02  # a tie
    assert free.winner == "fp32/b1"  # the tie goes to the lower risk
    # a ceiling between the two costs: fp32 is over it, int8 fits
    ceiling = HOURLY / (3.6 * (good["fp32/b1"] + good["int8/b4"]) / 2)
    assert fits_ceiling(good["fp32/b1"], HOURLY, ceiling) is False
    assert fits_ceiling(good["int8/b4"], HOURLY, ceiling) is True
    assert _confirm(tmp_path, ceiling).winner == "int8/b4"
    # a ceiling neither fits: the ceiling decides nothing, the tie goes to risk again
    assert _confirm(tmp_path, HOURLY / (3.6 * 100.0)).winner == "fp32/b1"
