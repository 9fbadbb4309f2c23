"""What each step of a search costs for this model on this machine, in seconds, scaled from
times the run measures (the ONNX export, the baseline's call times), and what a complete search
would need in all. ``--budget auto`` sizes the budget from the same model.

Every figure here is an estimate derived from measured times; ``CostFacts.basis`` names them.
A pass's build cost is the cost model it declares in its facts (passes/facts.py holds the
models and the ratios they were measured with); nothing here branches on a pass's name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from infertune.optimize.passes.facts import EXPORT_S_PER_MPARAM, CostFacts
from infertune.optimize.passes.registry import PassFactory, as_registry
from infertune.serial import Serial

# Time-boxed stages: their own caps in stages/ (confirm: 40 s per survivor, 3
# survivors; input options: 2 x 12 s) and, for the serving sweep, what `make demo` took here
# (70 s on minilm); the profile: its three rounds of 200 batch-1 requests, at least 20 s.
CONFIRM_S = 3 * 40.0
INPUTS_S = 24.0
SERVING_S = 70.0
PROFILE_CALLS = 600
QUICK_TIMING_S = 6.0  # screening's batch-1 timing cap per variant (stages/profile.py, quick_s)
# --budget auto stays within these: the smallest budget that measures anything (the CLI's
# floor) and an hour, beyond which a run should be planned, not sized automatically.
AUTO_MIN_S = 45.0
AUTO_MAX_S = 3600.0
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".onnx", ".pt", ".pth", ".data")
Passes = Mapping[str, PassFactory] | None  # a registry; None: every registered pass


def build_s(name: str, f: CostFacts, registry: Passes = None) -> float:
    """Estimated seconds to build pass ``name`` (its sources not included) and check it, by
    the cost model the pass declares (a pass without one: an export's time and the check)."""
    return as_registry(registry).facts(name).cost.build_s(f)


def screen_s(name: str, f: CostFacts) -> float:
    """Estimated seconds to screen a built variant: the quality run plus the quick timing at
    batch 1 and at the batch sizes serving forms (at most a quarter of that,
    stages/profile.py), taking the variant as fast as the baseline (an upper bound for the faster
    ones)."""
    quick = min(QUICK_TIMING_S, max(2.0, 20 * f.call_ms / 1e3))
    return f.n_quality * f.item_ms / 1000.0 + quick + min(quick / 4, 1.0)


def step_s(name: str, f: CostFacts, registry: Passes = None) -> float:
    return build_s(name, f, registry) + screen_s(name, f)


@dataclass
class BudgetEstimate(Serial):
    """Seconds a complete search of this model would need here, and how they were found."""

    seconds: float
    measured_s: float  # stages as they ran here
    estimated_s: float  # steps left out, from the cost model
    basis: str

    def sentence(self) -> str:
        if self.estimated_s <= 0:
            return (f"a complete search of this model took {self.measured_s:.0f} s here "
                    "(measured: every planned step ran)")
        return (f"a complete search of this model on this machine would need a budget of about "
                f"{self.seconds:.0f} s: {self.measured_s:.0f} s the stages took here (measured) "
                f"plus {self.estimated_s:.0f} s for the steps left out (estimate from "
                f"{self.basis}); pass --budget {_minutes(self.seconds)}"
                + (" or --budget auto" if self.seconds <= AUTO_MAX_S else ""))


def _minutes(seconds: float) -> str:
    return f"{-(-seconds // 60):.0f}m"


def complete_search_s(passes: list[str], f: CostFacts, survivors: int = 3,
                      registry: Passes = None) -> float:
    """Seconds for the whole run when every pass in ``passes`` is built and screened."""
    profile = max(20.0, PROFILE_CALLS * f.call_ms / 1000.0)
    reference = f.n_quality * f.item_ms / 1000.0 + QUICK_TIMING_S
    confirm = CONFIRM_S * min(survivors, 3) / 3
    return (profile + reference + sum(step_s(p, f, registry) for p in passes) + confirm + SERVING_S
            + INPUTS_S)


@dataclass(frozen=True)
class BudgetChoice(Serial):
    """What ``--budget auto`` chose, and why (printed and kept in run.json)."""

    seconds: float
    needed_s: float
    reason: str


def auto_budget(passes: list[str], f: CostFacts, registry: Passes = None) -> BudgetChoice:
    """The budget a complete search of ``passes`` needs here, within [AUTO_MIN_S, AUTO_MAX_S]."""
    need = complete_search_s(passes, f, registry=registry)
    seconds = min(max(need, AUTO_MIN_S), AUTO_MAX_S)
    capped = (f"; capped at {AUTO_MAX_S:.0f} s (pass --budget to allow more)"
              if need > AUTO_MAX_S else "")
    reason = (f"--budget auto: {seconds:.0f} s, what building and screening {len(passes)} "
              f"variants, the profile, the confirmations and the serving sweep need (estimate "
              f"from {f.basis}){capped}")
    return BudgetChoice(round(seconds, 1), round(need, 1), reason)


def params_millions(source: Path) -> float | None:
    """Million parameters from the size of the model's weight files at 4 bytes (fp32) each
    (a folder's files, or the one file); None when there are none to count."""
    files = [source] if source.is_file() else (
        [f for f in source.iterdir() if f.suffix in WEIGHT_SUFFIXES] if source.is_dir() else [])
    size = sum(f.stat().st_size for f in files if f.suffix in WEIGHT_SUFFIXES)
    return float(f"{size / 4 / 1e6:.3g}") if size else None


def budget_estimate(stage_seconds: Mapping[str, float], left_out_s: Sequence[float],
                    facts: CostFacts | None) -> BudgetEstimate:
    """A complete search: the stages' measured seconds plus the estimated need of each step
    the run left out (from the cost model when it had measured times, else the step's stated
    minimum)."""
    measured = sum(stage_seconds.values())
    missing = sum(left_out_s)
    basis = facts.basis if facts is not None else "each left-out step's stated minimum need"
    return BudgetEstimate(round(measured + missing, 1), round(measured, 1), round(missing, 1),
                          basis)


__all__ = ["AUTO_MAX_S", "AUTO_MIN_S", "EXPORT_S_PER_MPARAM", "BudgetChoice", "BudgetEstimate",
           "CostFacts", "auto_budget", "budget_estimate", "build_s", "complete_search_s",
           "params_millions", "screen_s", "step_s"]
