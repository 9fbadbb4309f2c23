from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from infertune.measure.stage_timers import STAGES, StageReport, StageSamples, time_requests


@dataclass
class ScriptedAdapter:
    """Each stage advances a fake nanosecond clock by a scripted amount."""

    pre_ms: list[float]
    fwd_ms: list[float]
    post_ms: list[float]
    now: int = 0
    i: int = 0
    info: Any = None
    runner: Any = None
    seen: list = field(default_factory=list)

    def clock(self) -> int:
        return self.now

    def _advance(self, ms: float) -> None:
        self.now += int(ms * 1e6)

    def preprocess(self, raw: list) -> dict:
        self.seen.append(raw)
        self._advance(self.pre_ms[self.i])
        return {"x": np.zeros(1)}

    def forward(self, inputs: dict) -> np.ndarray:
        self._advance(self.fwd_ms[self.i])
        return np.zeros(1)

    def postprocess(self, outputs: np.ndarray, inputs: dict) -> list:
        self._advance(self.post_ms[self.i])
        self.i += 1
        return [0]


def test_stage_times_and_shares_are_exact() -> None:
    n = 100
    pre = [1.0] * n
    fwd = [10.0] * n
    post = [1.0] * n
    post[-1] = 100.0  # one slow postprocess: the whole p99 tail
    ad = ScriptedAdapter(pre, fwd, post)
    samples = time_requests(ad, [["r"]] * n, clock=ad.clock)
    assert samples.forward == [10.0] * n
    assert samples.e2e[-1] == 111.0
    report = StageReport.from_samples(samples)
    assert report.tail_requests == 1
    assert report.share_p50["forward"] == pytest.approx(100 * 10 / 12)
    assert report.share_p50["postprocess"] == pytest.approx(100 * 1 / 12)
    assert report.share_p99["postprocess"] == pytest.approx(100 * 100 / 111)
    assert report.dominant_p50 == "forward"
    assert report.dominant_p99 == "postprocess"
    assert report.stage_ms("postprocess", tail=True) == pytest.approx(100.0)
    for shares in (report.share_p50, report.share_p99):
        assert set(shares) == set(STAGES)
        assert sum(shares.values()) == pytest.approx(100.0)
    assert StageReport.from_dict(report.to_dict()) == report


def test_shares_sum_to_100_on_random_timings() -> None:
    rng = np.random.default_rng(0)
    n = 500
    ad = ScriptedAdapter(list(rng.exponential(1, n)), list(rng.lognormal(2, 0.5, n)),
                         list(rng.exponential(0.3, n)))
    report = StageReport.from_samples(time_requests(ad, [["r"]] * n, clock=ad.clock))
    assert sum(report.share_p50.values()) == pytest.approx(100.0)
    assert sum(report.share_p99.values()) == pytest.approx(100.0)
    assert report.summaries["e2e"].count == n


def test_budget_stops_after_min_requests() -> None:
    ad = ScriptedAdapter([1.0] * 50, [10.0] * 50, [1.0] * 50)
    got = time_requests(ad, [["r"]] * 50, clock=ad.clock, budget_s=0.05, min_requests=3)
    assert len(got) == 5  # 12 ms each: after 5 requests 60 ms >= 50 ms


def test_empty_samples_refused() -> None:
    with pytest.raises(ValueError):
        StageReport.from_samples(StageSamples())
