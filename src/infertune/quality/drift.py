"""Drift between two sets of model outputs (variant vs baseline now; later, serving windows).

Each set is reduced to a few one-number-per-example summaries — the predicted class and its
confidence for classifiers, the norm and projections on fixed random directions for embeddings,
the score for rankers and regressors — and each summary is compared with

- the population stability index (PSI), binned on the reference's quantiles (10 bins), with the
  customary bands: < 0.1 stable, 0.1–0.25 moderate shift, >= 0.25 major shift;
- the two-sample Kolmogorov–Smirnov test (scipy), significant when p < 0.01 (continuous
  summaries only: KS assumes no ties, so the predicted class gets PSI alone).

A summary's verdict is "shifted" at PSI >= 0.25, "moderate" at PSI >= 0.1 or when only KS is
significant, otherwise "stable"; the overall verdict is the worst. A summary that is constant in
the reference (e.g. the norm of unit-normalised embeddings) cannot be binned; it is "stable" if
the current set is the same constant (to 1e-6 relative) and "shifted" otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.stats import ks_2samp

from infertune.serial import Serial

DriftVerdict = Literal["stable", "moderate", "shifted"]
SummaryKind = Literal["continuous", "categorical"]
_ORDER: dict[str, int] = {"stable": 0, "moderate": 1, "shifted": 2}
_EPS = 1e-4  # floor on bin shares so an empty bin does not make PSI infinite


@dataclass(frozen=True)
class DriftThresholds(Serial):
    psi_moderate: float = 0.1
    psi_major: float = 0.25
    ks_alpha: float = 0.01
    bins: int = 10


@dataclass
class SummaryDrift(Serial):
    name: str
    kind: SummaryKind
    verdict: DriftVerdict
    psi: float | None = None
    ks_statistic: float | None = None
    ks_pvalue: float | None = None
    note: str | None = None


@dataclass
class DriftResult(Serial):
    verdict: DriftVerdict
    summaries: list[SummaryDrift]
    n_reference: int
    n_current: int
    thresholds: DriftThresholds = field(default_factory=DriftThresholds)


def psi(reference: np.ndarray, current: np.ndarray, bins: int = 10) -> float:
    """PSI of a continuous summary, bins at the reference's quantiles."""
    edges = np.unique(np.quantile(reference, np.linspace(0, 1, bins + 1))[1:-1])
    ref_share = np.bincount(np.searchsorted(edges, reference, side="right"),
                            minlength=len(edges) + 1) / len(reference)
    cur_share = np.bincount(np.searchsorted(edges, current, side="right"),
                            minlength=len(edges) + 1) / len(current)
    return _psi_shares(ref_share, cur_share)


def psi_categorical(reference: np.ndarray, current: np.ndarray) -> float:
    """PSI of a categorical summary (e.g. the predicted class): one bin per category."""
    size = int(max(reference.max(), current.max())) + 1
    ref_share = np.bincount(reference.astype(np.int64), minlength=size) / len(reference)
    cur_share = np.bincount(current.astype(np.int64), minlength=size) / len(current)
    return _psi_shares(ref_share, cur_share)


def _psi_shares(ref_share: np.ndarray, cur_share: np.ndarray) -> float:
    ref = np.clip(ref_share, _EPS, None)
    cur = np.clip(cur_share, _EPS, None)
    return float(((cur - ref) * np.log(cur / ref)).sum())


def ks_test(reference: np.ndarray, current: np.ndarray) -> tuple[float, float]:
    # The exact p-value is only computable for small samples; the asymptotic one is what scipy
    # falls back to anyway (with a RuntimeWarning on the user's console), so ask for it directly
    # beyond that size.
    method = "exact" if len(reference) * len(current) < 10_000 else "asymp"
    result = ks_2samp(reference, current, method=method)
    return float(result.statistic), float(result.pvalue)


def output_summaries(outputs: np.ndarray, task: str, seed: int = 0,
                     directions: int = 3) -> dict[str, tuple[SummaryKind, np.ndarray]]:
    """One-number-per-example summaries of a batch-first output array. The random directions
    depend only on ``seed`` and the output width, so two sets get the same ones."""
    flat = outputs.reshape(len(outputs), -1).astype(np.float64)
    if task == "classification":
        return {"predicted_class": ("categorical", flat.argmax(axis=1).astype(np.float64)),
                "confidence": ("continuous", flat.max(axis=1))}
    if task in ("regression", "reranking") and flat.shape[1] == 1:
        return {"score": ("continuous", flat[:, 0])}
    rng = np.random.default_rng(seed)
    dirs = rng.standard_normal((flat.shape[1], directions))
    dirs /= np.linalg.norm(dirs, axis=0, keepdims=True)
    proj = flat @ dirs
    made: dict[str, tuple[SummaryKind, np.ndarray]] = {
        "norm": ("continuous", np.linalg.norm(flat, axis=1))}
    for j in range(directions):
        made[f"projection_{j}"] = ("continuous", proj[:, j])
    return made


def compare_summary(name: str, kind: SummaryKind, reference: np.ndarray, current: np.ndarray,
                    thresholds: DriftThresholds) -> SummaryDrift:
    if kind == "categorical":
        value = psi_categorical(reference, current)
        return SummaryDrift(name, kind, _band(value, None, thresholds), psi=value)
    scale = max(float(np.abs(reference).max()), 1e-12)
    if np.ptp(reference) <= 1e-6 * scale:
        same = bool(np.abs(current - reference[0]).max() <= 1e-6 * scale)
        return SummaryDrift(name, kind, "stable" if same else "shifted", note=(
            "constant in the reference, so it cannot be binned; the current set is "
            + ("the same constant" if same else "not")))
    value = psi(reference, current, thresholds.bins)
    stat, pvalue = ks_test(reference, current)
    return SummaryDrift(name, kind, _band(value, pvalue, thresholds), value, stat, pvalue)


def _band(value: float, pvalue: float | None, t: DriftThresholds) -> DriftVerdict:
    if value >= t.psi_major:
        return "shifted"
    if value >= t.psi_moderate or (pvalue is not None and pvalue < t.ks_alpha):
        return "moderate"
    return "stable"


def drift(reference_outputs: np.ndarray, current_outputs: np.ndarray, task: str,
          thresholds: DriftThresholds | None = None, seed: int = 0) -> DriftResult:
    """Compare the summaries of two output sets (they need the same width, not the same n)."""
    thresholds = thresholds or DriftThresholds()
    ref = output_summaries(reference_outputs, task, seed)
    cur = output_summaries(current_outputs, task, seed)
    rows = [compare_summary(name, kind, values, cur[name][1], thresholds)
            for name, (kind, values) in ref.items()]
    verdict = max((r.verdict for r in rows), key=_ORDER.__getitem__)
    return DriftResult(verdict, rows, len(reference_outputs), len(current_outputs), thresholds)
