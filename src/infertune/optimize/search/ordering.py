"""Which variant to build and screen next: the one with the highest expected gain per second
of budget, for this model on this machine (issue 14, "a budget spent by expected value").

    gain(pass)  = P(quality floor met) * E[max(0, 1/best - 1/S)]      S ~ lognormal(prior)
    rate(pass)  = gain / (its cost + the cost of the sources it still needs), in seconds

``best`` is the speed-up expected of what is already planned (1.0: the baseline), so the gain
is the *expected improvement* over it: a pass whose prior lies well below an INT8 variant
already planned is worth little, while a cheap, uncertain one still is. The speed-ups are
priors over the eager fp32 baseline at batch 1 (p95), each pass's own per hardware path (it
declares them where it registers; ``Prior`` sources say where each figure comes from); the
costs come from ``costs.py``, scaled by the export and call times measured in the run. The
plan is an estimate and is recorded as one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from infertune.hardware import HardwareInfo
from infertune.optimize.passes.facts import Prior, cpu_paths
from infertune.optimize.passes.registry import PassFactory, as_registry
from infertune.serial import Serial

Int8Path = Literal["vnni", "arm-dot", "no-vnni"]


def int8_path(hw: HardwareInfo) -> Int8Path:
    """How this CPU runs INT8 matrix products (a Xeon with AMX counts as VNNI here; its
    passes' priors may still name the more specific "amx" path)."""
    path = cpu_paths(hw)[-1]
    return "vnni" if path == "vnni" else "arm-dot" if path == "arm-dot" else "no-vnni"


def prior(name: str, hw: HardwareInfo,
          registry: Mapping[str, PassFactory] | None = None) -> Prior:
    """The prior the registered pass ``name`` declares for ``hw``'s path (a neutral one for
    a pass without a figure there, or one the registry does not know)."""
    return as_registry(registry).facts(name).prior(hw)


# Gauss-Hermite nodes for E[f(S)] with log S normal (20 points: exact enough for a ranking).
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(20)


def expected_gain(p: Prior, best: float) -> float:
    """P(floor) * E[max(0, 1/best - 1/S)]: the expected share of the baseline's latency this
    pass saves beyond a variant already expected to run ``best`` times faster."""
    speeds = np.exp(math.log(p.speedup) + p.spread * _NODES)
    saved = np.maximum(0.0, 1.0 / best - 1.0 / speeds)
    return float(p.p_quality * np.dot(_WEIGHTS, saved) / math.sqrt(2 * math.pi))


@dataclass
class PlannedPass(Serial):
    """One entry of the order: what it is expected to give and cost, and why it is here."""

    name: str
    expected_speedup: float
    expected_gain: float  # share of the baseline latency saved beyond the plan before it
    cost_s: float  # estimated build + screening seconds (sources counted where they are)
    rate: float  # expected_gain per second of budget (of the whole chain it starts)
    source: str  # where the prior comes from
    needed_by: str | None = None  # set when it is planned as the source of another pass


@dataclass
class SearchPlan(Serial):
    """The order the run builds and screens variants in, and what it rests on."""

    passes: list[PlannedPass] = field(default_factory=list)
    int8_path: str = ""
    basis: str = ""  # the measured times the costs were scaled from

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.passes]

    def describe(self) -> str:
        order = ", ".join(
            f"{p.name} ({p.expected_speedup:.2f}x expected, ~{p.cost_s:.0f} s"
            + (f", built for {p.needed_by})" if p.needed_by else ")") for p in self.passes)
        if not self.passes:
            return (f"no pass was built beyond the baseline's own and the export: none fitted "
                    f"the budget's share for building (estimates from {self.basis})")
        sources = "; ".join(dict.fromkeys(p.source for p in self.passes))
        return (f"build order by expected gain per second of budget (INT8 path: "
                f"{self.int8_path}; expected speed-ups are priors, costs are estimates from "
                f"{self.basis}): {order}. Where the priors come from: {sources}")


Sources = Callable[[str], Sequence[str]]  # pass name -> the passes it is built from


def plan_order(names: Sequence[str], hw: HardwareInfo, cost_s: Callable[[str], float],
               sources: Sources, done: Sequence[str] = (), basis: str = "",
               registry: Mapping[str, PassFactory] | None = None,
               batched: bool = False) -> SearchPlan:
    """Greedy order of ``names`` by expected gain per second, each pass's prior read from
    ``registry`` (default: every registered pass). A pass's cost includes the sources it needs
    that are neither ``done`` nor planned yet; they are planned just before it. Ties go to the
    order of ``names`` (the hand-written plan), so the result is stable. ``batched``: the
    traffic forms full batches, so a pass's batch-16 figure stands where it has one."""
    reg = as_registry(registry)

    def prior(name: str, hw: HardwareInfo) -> Prior:
        return reg.facts(name).prior(hw, batched)

    have = set(done)
    plan: list[PlannedPass] = []
    best = max([prior(n, hw).speedup for n in done] + [1.0])
    todo = [n for n in names if n not in have]
    while todo:
        scored = []
        for i, name in enumerate(todo):
            chain = _chain(name, sources, have)
            cost = max(sum(cost_s(n) for n in chain) + cost_s(name), 1e-3)
            gain = expected_gain(prior(name, hw), best)
            scored.append((-gain / cost, i, name, chain, gain, cost))
        _, _, name, chain, gain, cost = min(scored)
        for src in chain:
            p = prior(src, hw)
            plan.append(PlannedPass(src, p.speedup, expected_gain(p, best), cost_s(src), 0.0,
                                    p.source, needed_by=name))
            have.add(src)
            best = max(best, p.speedup)
        p = prior(name, hw)
        plan.append(PlannedPass(name, p.speedup, gain, cost_s(name), gain / cost, p.source))
        have.add(name)
        best = max(best, p.speedup)
        todo = [n for n in todo if n not in have]
    return SearchPlan(plan, int8_path(hw), basis)


def _chain(name: str, sources: Sources, have: set[str]) -> list[str]:
    """The sources ``name`` needs that are not built yet, deepest first (build order)."""
    out: list[str] = []

    def visit(n: str) -> None:
        for src in sources(n):
            if src not in have and src not in out:
                visit(src)
                out.append(src)

    visit(name)
    return out
