"""The quality floor gate: parse a floor, then judge a variant against it.

Floor grammar (the string form, as typed after ``--floor``)::

    FLOOR  :=  METRIC OP NUMBER                 the variant's metric itself must satisfy it
            |  METRIC "drop" "<=" NUMBER ["%"]  it may worsen by at most NUMBER from the
                                                baseline's score (metric units; with % a
                                                fraction of the baseline's score)
    OP     :=  ">=" (metrics where higher is better) | "<=" (where lower is better)

    e.g.  cosine>=0.99   mean_cosine>=0.99   accuracy drop<=0.005   accuracy drop<=1%
          ndcg@10 drop<=0.01   max_abs_diff<=0.05

"Worsen" is a fall for higher-is-better metrics and a rise for the others (mae, max_abs_diff).
The scenario file's ``constraints.quality_floor`` maps as {metric, min} -> ``METRIC>=min`` and
{metric, max_drop, relative} -> ``METRIC drop<=max_drop`` (relative: a fraction).

Verdict, from the paired bootstrap 95% CI of the judged quantity (the variant's metric for a
bound; the variant-minus-baseline worsening for a drop): ``pass`` when the whole CI is inside the
floor, ``fail`` when wholly outside, ``inconclusive`` otherwise, with an estimate of how many
examples would decide it. Floors on extremes (min_cosine, max_abs_diff, max_rel_diff) are judged
on the observed examples instead, because a bootstrap CI of a minimum is not trustworthy.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

import numpy as np

from infertune.config import QualityFloor
from infertune.errors import QualityFloorError
from infertune.quality.bootstrap import Draws, interval
from infertune.quality.metrics import Metric, get_metric
from infertune.serial import Serial

Verdict = Literal["pass", "fail", "inconclusive"]
FloorKind = Literal["bound", "drop"]

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_FLOOR = re.compile(
    rf"^\s*(?P<metric>[A-Za-z0-9_@]+)\s*(?:"
    rf"(?P<drop>drop)\s*<=\s*(?P<max_drop>{_NUM})\s*(?P<pct>%)?"
    rf"|(?P<op>>=|<=)\s*(?P<bound>{_NUM}))\s*$"
)
GRAMMAR = ("METRIC>=X or METRIC<=X (an absolute bound), or 'METRIC drop<=X' / "
           "'METRIC drop<=X%' (an allowed worsening from the baseline)")


@dataclass(frozen=True)
class Floor(Serial):
    metric: str  # canonical metric name, e.g. "mean_cosine", "ndcg@10"
    kind: FloorKind
    threshold: float  # the bound, or the allowed drop (a fraction when relative)
    op: Literal[">=", "<="] = ">="  # bounds only
    relative: bool = False  # drops only

    def text(self) -> str:
        if self.kind == "bound":
            return f"{self.metric}{self.op}{self.threshold:g}"
        amount = f"{self.threshold * 100:g}%" if self.relative else f"{self.threshold:g}"
        return f"{self.metric} drop<={amount}"


def parse_floor(text: str) -> Floor:
    """A floor from its string form (see the module docstring for the grammar)."""
    match = _FLOOR.match(text)
    if match is None:
        raise QualityFloorError(f"cannot read the quality floor {text!r}; write {GRAMMAR}, "
                                "e.g. 'cosine>=0.99' or 'accuracy drop<=1%'")
    metric = get_metric(match["metric"])
    if match["drop"]:
        amount = float(match["max_drop"])
        relative = match["pct"] is not None
        return _checked(Floor(metric.name, "drop", amount / 100 if relative else amount,
                              relative=relative), metric)
    op: Literal[">=", "<="] = ">=" if match["op"] == ">=" else "<="  # the regex allows only these
    return _checked(Floor(metric.name, "bound", float(match["bound"]), op=op), metric)


def floor_from_config(config: QualityFloor) -> Floor:
    """A floor from the scenario's ``constraints.quality_floor``."""
    metric = get_metric(config.metric)
    if config.min is not None:
        if not metric.higher_is_better:
            raise QualityFloorError(
                f"quality_floor: {metric.name} is lower-is-better, so 'min' cannot bound it; "
                f"use max_drop, or pass --floor '{metric.name}<=X'"
            )
        return _checked(Floor(metric.name, "bound", config.min, op=">="), metric)
    assert config.max_drop is not None
    return _checked(Floor(metric.name, "drop", config.max_drop, relative=config.relative), metric)


def _checked(floor: Floor, metric: Metric) -> Floor:
    if floor.kind == "bound":
        wanted = ">=" if metric.higher_is_better else "<="
        if floor.op != wanted:
            better = "higher" if metric.higher_is_better else "lower"
            raise QualityFloorError(
                f"{floor.text()!r}: {better} {metric.name} is better, so its floor is "
                f"'{metric.name}{wanted}X'"
            )
    elif floor.threshold < 0:
        raise QualityFloorError(f"{floor.text()!r}: an allowed drop must be >= 0")
    return floor


@dataclass
class FloorCheck(Serial):
    """The verdict of one floor, with the judged quantity and how it was judged."""

    floor: Floor
    quantity: str  # what the CI is of, in words
    estimate: float
    ci_low: float
    ci_high: float
    verdict: Verdict
    method: str  # "paired bootstrap" or "observed extreme"
    explanation: str
    more_examples: int | None = None  # inconclusive: about how many more would likely decide


def check_floor(floor: Floor, metric: Metric, draws: Draws, n: int,
                unit: str = "examples") -> FloorCheck:
    """Judge ``draws`` (the floor metric's bootstrap draws over n examples, or n ``unit``: the
    queries a per-query ranking metric resamples) against the floor."""
    if metric.extreme:
        return _check_extreme(floor, metric, draws, n)
    quantity, estimate, samples, limit, upper = _judged(floor, metric, draws)
    low, high = interval(samples)
    inside = (high <= limit) if upper else (low >= limit)
    outside = (low > limit) if upper else (high < limit)
    verdict: Verdict = "pass" if inside else "fail" if outside else "inconclusive"
    side = "<=" if upper else ">="
    text = (f"{quantity} = {estimate:.4g}, 95% CI [{low:.4g}, {high:.4g}] over {n} {unit} "
            f"(paired bootstrap, {len(samples)} resamples); the floor needs {side} {limit:.4g}")
    more = None
    if verdict == "inconclusive":
        more, why = _more_examples(estimate, low, high, limit, n)
        text += "; " + why
    return FloorCheck(floor, quantity, estimate, low, high, verdict, "paired bootstrap", text,
                      more)


def _judged(floor: Floor, metric: Metric,
            draws: Draws) -> tuple[str, float, np.ndarray, float, bool]:
    """(quantity in words, estimate, its resamples, limit, limit-is-an-upper-bound)."""
    if floor.kind == "bound":
        return (f"{metric.name} vs {metric.vs}", draws.variant_value, draws.variant,
                floor.threshold, floor.op == "<=")
    sign = 1.0 if metric.higher_is_better else -1.0
    worse = sign * (draws.baseline - draws.variant)
    estimate = sign * (draws.baseline_value - draws.variant_value)
    name = f"worsening of {metric.name} (baseline minus variant)" if sign > 0 else \
        f"worsening of {metric.name} (variant minus baseline)"
    if floor.relative:
        if draws.baseline_value == 0 or np.any(draws.baseline == 0):
            raise QualityFloorError(
                f"a relative drop of {metric.name} is undefined because the baseline scores 0; "
                f"use an absolute floor, e.g. '{metric.name} drop<={floor.threshold:g}'"
            )
        worse = worse / np.abs(draws.baseline)
        estimate = estimate / abs(draws.baseline_value)
        name = f"relative {name}"
    return name, estimate, worse, floor.threshold, True


def _more_examples(estimate: float, low: float, high: float, limit: float,
                   n: int) -> tuple[int | None, str]:
    """CI half-widths shrink about as 1/sqrt(n): the side facing the limit must shrink below
    the gap between the estimate and the limit, so n_needed ~ n * (half_width / gap)^2."""
    gap = abs(estimate - limit)
    # the side of the CI that faces the limit is the one that must clear it
    half = (estimate - low) if estimate >= limit else (high - estimate)
    if gap == 0 or half <= 0:
        return None, ("the estimate sits on the floor itself, so more examples would not likely "
                      "decide it; the variant is as good as the floor, no better")
    needed = math.ceil(n * (half / gap) ** 2)
    more = max(needed - n, 1)
    return more, (f"inconclusive: need ~{more} more examples (estimate: the CI half-width "
                  f"{half:.3g} shrinks about as 1/sqrt(n) and must fall below the gap {gap:.3g} "
                  f"to the floor, so about n*(half/gap)^2 = {needed} examples in all, if the "
                  "estimate holds; at that size the CI just reaches the floor, so budget more)")


def _check_extreme(floor: Floor, metric: Metric, draws: Draws, n: int) -> FloorCheck:
    """min/max over examples: judged on the examples seen. A violating example is a fact; none
    bounds the share of such inputs by the rule of three (3/n at 95%)."""
    limit, upper = _extreme_limit(floor, metric, draws)
    per = draws.variant_per_example
    assert per is not None
    beyond = int((per > limit).sum() if upper else (per < limit).sum())
    side = "<=" if upper else ">="
    low, high = interval(draws.variant)
    base = (f"{metric.name} = {draws.variant_value:.4g} over {n} examples; the floor needs "
            f"{side} {limit:.4g}; {beyond} of {n} examples are beyond it")
    caveat = ("judged on the examples seen, not by a bootstrap CI: a CI of a minimum or maximum "
              "is unreliable because a resample can never go past the observed extreme")
    if beyond:
        verdict: Verdict = "fail"
        text = f"{base} (an observed fact, not an estimate)"
    else:
        verdict = "pass"
        text = (f"{base}; with 95% confidence at most {3 / n:.2%} of inputs like these would be "
                f"beyond it (rule of three, 3/n); {caveat}")
    return FloorCheck(floor, f"{metric.name} vs {metric.vs}", draws.variant_value, low, high,
                      verdict, "observed extreme", text)


def _extreme_limit(floor: Floor, metric: Metric, draws: Draws) -> tuple[float, bool]:
    if floor.kind == "bound":
        return floor.threshold, floor.op == "<="
    base = draws.baseline_value
    if floor.relative and base == 0:
        raise QualityFloorError(
            f"a relative drop of {metric.name} is undefined because the baseline scores 0; "
            f"use a bound, e.g. '{metric.name}{'>=' if metric.higher_is_better else '<='}X'"
        )
    step = floor.threshold * abs(base) if floor.relative else floor.threshold
    return (base - step, False) if metric.higher_is_better else (base + step, True)
