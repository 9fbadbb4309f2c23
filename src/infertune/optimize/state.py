"""The run directory (DESIGN.md), the live state of a run (RunState) and what a stage is handed
(StageContext). A stage reads the RunState and returns its findings as its artifact
(findings.py), which run.py stores on the state; it writes to the state only the live handles
(held-out inputs, reference outputs, timing requests, baseline samples, adapters, contention)
and the run's log.

    runs/<name>/
      scenario.yaml          what the user told us (and what we detected, under `detected`)
      hardware.json          hardware.detect()
      profile.json           the baseline profile (stages, curve, hotspots...)
      variants/<id>/         manifest.json (+ model files), latency.json, quality.json
      serving.json           the policy sweep, validations, batching effects
      extras.json            inputs/caching options, candidates and cascades, right-sizing
      run.json               every stage's artifact (findings.py), schema infertune.run/v2
      report.json            schema infertune.report/v1 (+ "serving": {"policy": ...})
      report.md, report.html, plots/

This module is the ground floor of the pipeline: the stages (stages/), the order
(run.py) and the report builder (report/run_report.py) import it; it imports none of them.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from infertune.artifacts import RunPaths  # the run folder's paths (RunDir reads them)
from infertune.config import Scenario
from infertune.data import HeldOut
from infertune.models import load
from infertune.models.adapter import Adapter
from infertune.optimize.findings import RunFindings
from infertune.optimize.search.budget import Budget, Progress
from infertune.optimize.search.screening import ScreenCurve
from infertune.optimize.search.timing import Skipped
from infertune.optimize.served.traffic import Contention
from infertune.quality import Floor, floor_from_config, parse_floor

DEFAULT_BUDGET_S = 330.0  # 5.5 minutes: the demo must finish in < 6 on 2 cores
QUICK_BUDGET_S = 90.0


@dataclass
class OptimizeOptions:
    model: str
    scenario: Scenario
    data: HeldOut
    out: Path
    budget_s: float = DEFAULT_BUDGET_S
    quick: bool = False
    candidates: list[str] = field(default_factory=list)
    seed: int = 0
    scenario_source: str = ""
    budget_auto: bool = False  # --budget auto: budget_s is resized from the model's costs


class VariantAdapters(MutableMapping[str, Adapter]):
    """The run's variants by id, loaded from their folders on use, one at a time.

    Why one at a time: an onnxruntime session with spinning threads that has run keeps them
    spinning, and a variant timed after it in the same process runs slower. Measured on a
    2-core AVX2 EPYC (session 5), MiniLM INT8 without spinning: batch-1 p50 3.9 ms with the
    spinning INT8 variant loaded but not yet run, 4.5-5.4 ms after it ran, 3.9 ms after it was
    released. Screening and the finalists' service curves time one variant after another, so
    each use of a variant loads it afresh and releases the one used before (a reload of a
    small model takes well under a second; the figures it protects decide which variants
    reach the finals). An adapter set directly (``adapters[id] = adapter``) has no folder to
    reload from and is kept."""

    def __init__(self, loader: Callable[[Path], Adapter] = load) -> None:
        self._loader = loader
        self._folders: dict[str, Path] = {}
        self._loaded: dict[str, Adapter] = {}  # at most one, from a folder
        self._kept: dict[str, Adapter] = {}

    def add(self, variant_id: str, folder: Path) -> None:
        """Know ``variant_id``'s folder; it loads on first use."""
        self._folders[variant_id] = folder

    def __getitem__(self, variant_id: str) -> Adapter:
        if variant_id in self._kept:
            return self._kept[variant_id]
        if variant_id in self._loaded:
            return self._loaded[variant_id]
        folder = self._folders[variant_id]  # KeyError: an unknown variant
        self.release()
        adapter = self._loaded[variant_id] = self._loader(folder)
        return adapter

    def release(self) -> None:
        """Drop the variant loaded from a folder, so its runtime's threads end (unless a caller
        still holds the adapter)."""
        if self._loaded:
            self._loaded.clear()
            gc.collect()  # sessions sit in reference cycles; free them (and their threads) now

    def __setitem__(self, variant_id: str, adapter: Adapter) -> None:
        self._kept[variant_id] = adapter

    def __delitem__(self, variant_id: str) -> None:
        found = False
        for store in (self._folders, self._loaded, self._kept):
            found = store.pop(variant_id, None) is not None or found
        if not found:
            raise KeyError(variant_id)

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self._kept, *self._folders]))

    def __len__(self) -> int:
        return len(set(self._kept) | set(self._folders))


@dataclass
class RunState(RunFindings):
    """The live run: its findings (RunFindings, one artifact per stage, findings.py, each
    stored by run.py from what its stage returned) and what only the running process holds:
    the options, the adapters, the held-out inputs and reference outputs, the timing requests.
    run.json is written from it when the stages are done."""

    options: OptimizeOptions
    paths: RunPaths
    baseline: Adapter
    reference: np.ndarray | None = None  # baseline outputs on the quality subset
    quality_inputs: list[Any] = field(default_factory=list)
    quality_labels: list[Any] | None = None  # the labels of quality_inputs, row for row
    quality_groups: list[str] | None = None  # pairs: the query group of each quality input
    requests: list[list[Any]] = field(default_factory=list)  # batch-1 timing requests
    base_samples: list[float] = field(default_factory=list)  # baseline ms on those requests
    base_curve: ScreenCurve | None = None  # baseline call ms at the batch sizes serving forms
    # variant id -> Adapter, loaded on use, one at a time (see VariantAdapters)
    adapters: VariantAdapters = field(default_factory=VariantAdapters)
    contention: Contention | None = None

    def skip(self, what: str, reason: str, need_s: float | None = None) -> None:
        self.log.skipped.append(Skipped(what, reason, need_s))

    @property
    def task(self) -> str:
        return self.baseline.info.task


@dataclass
class StageContext:
    """What a stage's ``run(ctx) -> <Stage>Artifact`` is handed: the live run (options, paths,
    adapters, held-out inputs and reference outputs, and the artifacts of the stages before it,
    which it reads and does not change), the budget and the progress display. The stage
    returns its own artifact and run.py stores it; notes and skips go to the run's log
    (``state.skip``, ``state.log.notes``), the one record every stage adds to."""

    state: RunState
    budget: Budget
    progress: Progress


def floor_for(scenario: Scenario, task: str) -> Floor:
    """The scenario's floor, else the task's default (the run always judges against one)."""
    cfg = scenario.constraints.quality_floor
    if cfg is not None:
        return floor_from_config(cfg)
    return parse_floor({"embedding": "mean_cosine>=0.99", "classification":
                        "argmax_agreement>=0.99"}.get(task, "max_rel_diff<=0.01"))


def quality_floor(state: RunState) -> Floor:
    return floor_for(state.options.scenario, state.task)


def quality_metrics(task: str, has_labels: bool = False) -> list[str]:
    """The metrics every variant's quality.json reports beside the floor's. A reranker's
    ranking metrics are per query (grouped held-out rows); NDCG and MRR need relevance labels,
    rank agreement with the baseline's order does not."""
    if task == "reranking":
        return (["ndcg@10", "mrr@10"] if has_labels else []) + ["rank_agreement", "max_abs_diff"]
    return {"embedding": ["mean_cosine", "min_cosine", "knn_agreement@10", "max_abs_diff"],
            "classification": ["argmax_agreement", "max_abs_diff"]}.get(task, ["max_abs_diff"])
