"""Length bucketing's option in a run's report: the offline A/B (the whole held-out set sorted
by length before batching) is an upper bound on what serve, which already groups batched
requests by padding cost, would gain, so its impact is an estimate between no change and that
bound, carrying the measured bound as its input, and it ranks on the range, not the bound."""

from __future__ import annotations

from infertune.config import Scenario
from infertune.optimize.served.input_options import TimedOption
from infertune.report.options import rank_options
from infertune.report.provenance import provenance_problems
from infertune.report.run_options import bucketing_option, timed_option
from infertune.report.schema import Rated

HW = "test cpu (2 cores)"


def timed(name: str, ratio_p95: float) -> TimedOption:
    return TimedOption(name=name, a_label="arrival order", b_label=name, a_p50_ms=10.0,
                       b_p50_ms=10.0 * ratio_p95, a_p95_ms=20.0, b_p95_ms=20.0 * ratio_p95,
                       ratio_p95=ratio_p95, ratio_p95_low=ratio_p95 - 0.02,
                       ratio_p95_high=ratio_p95 + 0.02, verdict="faster", samples=120,
                       detail="batches of 8")


def test_bucketing_is_an_estimate_bounded_by_the_offline_measurement() -> None:
    o = bucketing_option(timed("length-sorted", 0.6), HW)
    assert o.source == "estimate"
    p95 = o.impact.p95
    assert p95 is not None and p95.source == "estimate"
    assert (p95.value, p95.low, p95.high) == (None, -40.0, 0.0)
    assert "serve already groups requests by padding cost" in p95.basis
    bound = p95.inputs[0]
    assert bound.source == "measured" and bound.value == -40.0 and bound.samples == 120
    assert "upper bound" in o.applicability
    assert provenance_problems({"options": [o.model_dump(mode="json")]}) == []
    # an offline slowdown is a range from no change up to it
    slower = bucketing_option(timed("length-sorted", 1.1), HW).impact.p95
    assert slower is not None and (slower.low, slower.high) == (0.0, 10.0)


def test_bucketing_no_longer_ranks_first_on_its_upper_bound() -> None:
    """A measured 25% gain outranks bucketing's offline 40% bound (the middle of 0..-40%)."""
    low = Rated(level="low", reason="a preprocessing setting")
    trimming = timed_option("input-trimming", "Trim inputs", timed("trimmed", 0.75), HW, low,
                            low, "re-run the quality check")
    bucketing = bucketing_option(timed("length-sorted", 0.6), HW)
    ranked = rank_options([bucketing, trimming], Scenario(), inside=False)
    assert [o.id for o in ranked] == ["input-trimming", "length-bucketing"]
