"""What each step of a search costs for this model on this machine, in seconds, scaled from
times the run measures (the ONNX export, the baseline's call times), and what a complete search
would need in all. ``--budget auto`` sizes the budget from the same model.

Every figure here is an estimate derived from measured times; ``CostFacts.basis`` names them.
The ratios below were measured with `optimize.passes.build_variants` on minilm (22.7M
parameters) and a BERT-base-sized encoder (110M) on a 2-core AVX2 EPYC shared with other jobs
(2026-12-01); they put a pass's build time in units of the same run's export time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# Seconds of ONNX export (torch.onnx.export + the build check) per million parameters, before
# the run has measured its own export: minilm 8.3 s / 22.7M, BERT-base 40 s / 110M here.
EXPORT_S_PER_MPARAM = 0.37
# Pass build time / export time, measured as above (minilm, BERT-base).
TORCH_COPY_RATIO = 1.0  # torch_fp32: saving the eager model and checking it
FUSE_RATIO = 1.1  # the transformer optimizer's fusion
QUANT_RATIO = 0.2  # one quantize_dynamic call (the calibration scoring is counted apart)
# Time-boxed stages: their own caps in steps.py/policy.py (confirm: 40 s per survivor, 3
# survivors; input options: 2 x 12 s) and, for the serving sweep, what `make demo` took here
# (70 s on minilm); the profile: its three rounds of 200 batch-1 requests, at least 20 s.
CONFIRM_S = 3 * 40.0
INPUTS_S = 24.0
SERVING_S = 70.0
PROFILE_CALLS = 600
QUICK_TIMING_S = 6.0  # screening's batch-1 timing cap per variant (steps._quick_s)
# --budget auto stays within these: the smallest budget that measures anything (the CLI's
# floor) and an hour, beyond which a run should be planned, not sized automatically.
AUTO_MIN_S = 45.0
AUTO_MAX_S = 3600.0
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".onnx", ".pt", ".pth", ".data")


@dataclass(frozen=True)
class CostFacts:
    """The measured times a cost estimate scales from, and the run's sample counts."""

    call_ms: float  # baseline batch-1 median, measured
    item_ms: float  # baseline time per input at batch 16 (the quality runs), measured
    cal_item_ms: float | None = None  # the same on the calibration inputs (the shortest)
    export_s: float | None = None  # the run's ONNX export, measured once built
    params_m: float | None = None  # million parameters (from the weight files)
    matmuls: int = 0  # MatMul/Gemm nodes in the exported graph (mixed precision scores each)
    schemes: int = 1  # INT8 schemes tried on this CPU
    n_quality: int = 300
    n_calibration: int = 128
    n_samples: int = 32

    @property
    def export(self) -> float:
        """The export's seconds: measured, else scaled from the parameter count."""
        if self.export_s is not None:
            return self.export_s
        return EXPORT_S_PER_MPARAM * (self.params_m if self.params_m is not None else 25.0)

    @property
    def basis(self) -> str:
        parts = [f"a batch-1 call of {self.call_ms:.1f} ms and {self.item_ms:.1f} ms per input "
                 "at batch 16, measured here"]
        if self.export_s is not None:
            parts.append(f"an ONNX export of {self.export_s:.3g} s, measured here")
        elif self.params_m is not None:
            parts.append(f"{self.params_m:.3g}M parameters (export estimated at "
                         f"{EXPORT_S_PER_MPARAM} s per million)")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CostFacts:
        return cls(**dict(data))


def build_s(name: str, f: CostFacts) -> float:
    """Estimated seconds to build pass ``name`` (its sources not included) and check it."""
    check = f.n_samples * f.item_ms / 1000.0
    cal_ms = f.cal_item_ms if f.cal_item_ms is not None else f.item_ms
    scored = f.n_calibration * cal_ms / 1000.0  # one scoring run on the calibration inputs
    quant = QUANT_RATIO * f.export + scored
    if name == "ort_fp32":
        return f.export
    if name in ("torch_fp32", "torch_bf16", "torch_fp16", "torch_int8_dynamic"):
        return TORCH_COPY_RATIO * f.export
    if name == "ort_fused":
        return FUSE_RATIO * f.export
    if name.startswith("ort_int8_mixed"):
        # every MatMul quantized alone and scored, then the mix (one scheme choice first)
        return (max(f.matmuls, 1) + f.schemes) * quant + check
    if name.startswith("ort_int8_static"):
        return f.schemes * (quant + scored) + check
    if name.startswith("ort_int8_dynamic"):
        return f.schemes * quant + check
    if "threads" in name or name.startswith("ort_graph"):
        return check + 1.0
    return f.export + check


def screen_s(name: str, f: CostFacts) -> float:
    """Estimated seconds to screen a built variant: the quality run plus the quick timing,
    taking the variant as fast as the baseline (an upper bound for the faster ones)."""
    return f.n_quality * f.item_ms / 1000.0 + min(QUICK_TIMING_S, max(2.0, 20 * f.call_ms / 1e3))


def step_s(name: str, f: CostFacts) -> float:
    return build_s(name, f) + screen_s(name, f)


@dataclass
class BudgetEstimate:
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BudgetEstimate:
        return cls(**dict(data))


def _minutes(seconds: float) -> str:
    return f"{-(-seconds // 60):.0f}m"


def complete_search_s(passes: list[str], f: CostFacts, survivors: int = 3) -> float:
    """Seconds for the whole run when every pass in ``passes`` is built and screened."""
    profile = max(20.0, PROFILE_CALLS * f.call_ms / 1000.0)
    reference = f.n_quality * f.item_ms / 1000.0 + QUICK_TIMING_S
    confirm = CONFIRM_S * min(survivors, 3) / 3
    return (profile + reference + sum(step_s(p, f) for p in passes) + confirm + SERVING_S
            + INPUTS_S)


@dataclass(frozen=True)
class BudgetChoice:
    """What ``--budget auto`` chose, and why (printed and kept in run.json)."""

    seconds: float
    needed_s: float
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BudgetChoice:
        return cls(**dict(data))


def auto_budget(passes: list[str], f: CostFacts) -> BudgetChoice:
    """The budget a complete search of ``passes`` needs here, within [AUTO_MIN_S, AUTO_MAX_S]."""
    need = complete_search_s(passes, f)
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
