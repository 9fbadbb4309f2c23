"""Which variant to build and screen next: the one with the highest expected gain per second
of budget, for this model on this machine (issue 14, "a budget spent by expected value").

    gain(pass)  = P(quality floor met) * E[max(0, 1/best - 1/S)]      S ~ lognormal(prior)
    rate(pass)  = gain / (its cost + the cost of the sources it still needs), in seconds

``best`` is the speed-up expected of what is already planned (1.0: the baseline), so the gain
is the *expected improvement* over it: a pass whose prior lies well below an INT8 variant
already planned is worth little, while a cheap, uncertain one still is. The speed-ups are
priors over the eager fp32 baseline at batch 1 (p95), chosen by the CPU's INT8 path (``Prior``
sources say where each figure comes from); the costs come from ``costs.py``, scaled by the
export and call times measured in the run. The plan is an estimate and is recorded as one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from infertune.hardware import VNNI_FLAGS, HardwareInfo

Int8Path = Literal["vnni", "arm-dot", "no-vnni"]

# Where the priors come from (each Prior names one of these).
AVX2_DEMO = ("measured: `make demo` screening of minilm (300 batch-1 samples a side, p95) on a "
             "2-core AVX2-only AMD EPYC 7B12, 2026-12-01, runs/demo/run.json")
VNNI_KB = ("measured: minilm ORT dynamic INT8 per-channel p50 2.6 ms against 13.4 ms torch fp32 "
           "on a 2-core EPYC with avx512_vnni (report/knowledge/model.yaml, int8-cpu)")
VNNI_SCALED = ("estimate: the AVX2 figure scaled by the INT8 gain with VNNI over the gain "
               "without it (5.2x / 2.72x, the two measurements above)")
ARM_GUESS = ("estimate, not measured on ARM: taken as on VNNI, since asimd_dotprod/i8mm give "
             "ARM the same native INT8 dot product")
NEUTRAL = "no measurement: a neutral prior (speed-up 1.0, wide spread)"
MEASURED_SPREAD = 0.35  # log-sd: one model's figure stands for every model of the family
GUESS_SPREAD = 0.6


@dataclass(frozen=True)
class Prior:
    """What a pass is expected to give before it is measured: the median p95 speed-up over
    the eager baseline, its spread (log-sd), and the chance its variant meets the floor."""

    speedup: float
    spread: float
    p_quality: float
    source: str


# AVX2 (no VNNI): the demo's quick screening figures. Per-tensor INT8 failed the 0.99 floor
# there (0.984) and per-channel passed (0.993), hence their quality chances.
_NO_VNNI: dict[str, Prior] = {
    "torch_fp32": Prior(1.0, 0.05, 1.0, "the baseline itself"),
    "ort_fp32": Prior(1.41, MEASURED_SPREAD, 1.0, AVX2_DEMO),
    "ort_fused": Prior(1.62, MEASURED_SPREAD, 1.0, AVX2_DEMO),
    "ort_int8_dynamic_per_channel": Prior(2.72, MEASURED_SPREAD, 0.8, AVX2_DEMO),
    "ort_int8_dynamic_per_tensor": Prior(2.0, MEASURED_SPREAD, 0.4, AVX2_DEMO),
    "ort_int8_mixed": Prior(1.53, MEASURED_SPREAD, 0.95, AVX2_DEMO),
    "ort_int8_threads_one": Prior(1.10, MEASURED_SPREAD, 0.8, AVX2_DEMO),
    "ort_int8_threads_cores_nospin": Prior(1.89, MEASURED_SPREAD, 0.8, AVX2_DEMO),
    "ort_threads_cores_nospin": Prior(1.24, MEASURED_SPREAD, 1.0, AVX2_DEMO),
}
_INT8_VNNI_GAIN = 5.2 / 2.72
_INT8_PASSES = ("ort_int8_dynamic_per_channel", "ort_int8_dynamic_per_tensor", "ort_int8_mixed",
                "ort_int8_threads_one", "ort_int8_threads_cores_nospin")
# Static INT8 (tensor models' Conv graphs): taken as dynamic per-channel's, less sure of the
# floor (min-max calibration measured mean cosine 0.931 on minilm here, issue 13).
_STATIC = ("ort_int8_static_minmax", "ort_int8_static_percentile", "ort_int8_static_entropy")


def int8_path(hw: HardwareInfo) -> Int8Path:
    """How this CPU runs INT8 matrix products (what the priors depend on)."""
    if any(hw.has(f) for f in VNNI_FLAGS):
        return "vnni"
    arm = hw.arch.startswith(("arm", "aarch")) or hw.has("neon")
    if arm and (hw.has("asimd_dotprod") or hw.has("i8mm")):
        return "arm-dot"
    return "no-vnni"


def prior(name: str, hw: HardwareInfo) -> Prior:
    """The prior for pass ``name`` on ``hw`` (a neutral one for a pass without a figure)."""
    path = int8_path(hw)
    if name in _STATIC:
        base = prior("ort_int8_dynamic_per_channel", hw)
        return Prior(base.speedup, GUESS_SPREAD, 0.5, "estimate: as dynamic per-channel INT8 ("
                     + base.source + "), less sure of the floor")
    found = _NO_VNNI.get(name)
    if found is None:
        return Prior(1.0, GUESS_SPREAD, 0.9, NEUTRAL)
    if path == "no-vnni" or name not in _INT8_PASSES:
        return found
    speedup = found.speedup * _INT8_VNNI_GAIN
    source = VNNI_KB if name == "ort_int8_dynamic_per_channel" else VNNI_SCALED
    if path == "arm-dot":
        return Prior(speedup, GUESS_SPREAD, found.p_quality, ARM_GUESS)
    return Prior(speedup, found.spread, found.p_quality, source)


# Gauss-Hermite nodes for E[f(S)] with log S normal (20 points: exact enough for a ranking).
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(20)


def expected_gain(p: Prior, best: float) -> float:
    """P(floor) * E[max(0, 1/best - 1/S)]: the expected share of the baseline's latency this
    pass saves beyond a variant already expected to run ``best`` times faster."""
    speeds = np.exp(math.log(p.speedup) + p.spread * _NODES)
    saved = np.maximum(0.0, 1.0 / best - 1.0 / speeds)
    return float(p.p_quality * np.dot(_WEIGHTS, saved) / math.sqrt(2 * math.pi))


@dataclass
class PlannedPass:
    """One entry of the order: what it is expected to give and cost, and why it is here."""

    name: str
    expected_speedup: float
    expected_gain: float  # share of the baseline latency saved beyond the plan before it
    cost_s: float  # estimated build + screening seconds (sources counted where they are)
    rate: float  # expected_gain per second of budget (of the whole chain it starts)
    source: str  # where the prior comes from
    needed_by: str | None = None  # set when it is planned as the source of another pass

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlannedPass:
        return cls(**dict(data))


@dataclass
class SearchPlan:
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

    def to_dict(self) -> dict[str, Any]:
        return {"passes": [p.to_dict() for p in self.passes], "int8_path": self.int8_path,
                "basis": self.basis}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchPlan:
        return cls([PlannedPass.from_dict(p) for p in data["passes"]], data["int8_path"],
                   data["basis"])


Sources = Callable[[str], Sequence[str]]  # pass name -> the passes it is built from


def plan_order(names: Sequence[str], hw: HardwareInfo, cost_s: Callable[[str], float],
               sources: Sources, done: Sequence[str] = (), basis: str = "") -> SearchPlan:
    """Greedy order of ``names`` by expected gain per second. A pass's cost includes the
    sources it needs that are neither ``done`` nor planned yet; they are planned just before
    it. Ties go to the order of ``names`` (the hand-written plan), so the result is stable."""
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
