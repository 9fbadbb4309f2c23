"""Check a variant against the baseline on held-out data: metrics with CIs, the floor verdict,
and drift between the two output sets.

    result = compare_quality(baseline, variant, data, "cosine>=0.99")   # runs both models
    result = evaluate_outputs(base_out, var_out, labels, floor, "embedding")  # already ran them
    result.save(variant_dir / "quality.json");  QualityResult.load(path)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from infertune.config import QualityFloor
from infertune.data import HeldOut
from infertune.data.text_inputs import is_text_input, text_length
from infertune.errors import DataError, IncompatibleInputError, InfertuneError, QualityFloorError
from infertune.jsonfile import read_json, write_json
from infertune.models.adapter import Adapter
from infertune.quality.bootstrap import (
    DEFAULT_RESAMPLES,
    DEFAULT_SET_RESAMPLES,
    MetricValue,
    draw,
    metric_value,
    resample_indices,
)
from infertune.quality.degenerate import check_outputs_vary
from infertune.quality.drift import DriftResult, drift
from infertune.quality.floor import Floor, FloorCheck, Verdict, check_floor, floor_from_config
from infertune.quality.floor import parse_floor as _parse_floor
from infertune.quality.metrics import (
    Metric,
    QueryGroups,
    default_metrics,
    for_groups,
    for_list_outputs,
    get_metric,
    normalise_task,
)
from infertune.serial import Serial

SCHEMA = "infertune.quality/v1"
FloorLike = Floor | QualityFloor | str
Progress = Callable[[int], None]  # called with the number of examples just run


@dataclass
class QualityResult(Serial):
    """Everything ``validate`` found for one variant; what optimize stores as quality.json."""

    verdict: Verdict
    floor_check: FloorCheck
    metrics: list[MetricValue]
    task: str
    n_examples: int
    has_labels: bool
    baseline: str = "baseline"
    variant: str = "variant"
    data_source: str = ""
    seed: int = 0
    resamples: int = DEFAULT_RESAMPLES
    drift: DriftResult | None = None
    notes: list[str] = field(default_factory=list)
    schema: str = SCHEMA

    def __post_init__(self) -> None:
        if self.schema != SCHEMA:
            raise DataError(f"not a quality result (schema {self.schema!r}, "
                            f"expected {SCHEMA!r})")

    def metric(self, name: str) -> MetricValue:
        canonical = get_metric(name).name
        for value in self.metrics:
            if value.name == canonical:
                return value
        raise KeyError(canonical)

    def summary_line(self) -> str:
        check = self.floor_check
        return f"{self.verdict}: {check.floor.text()} — {check.explanation}"


    def save(self, path: str | Path) -> Path:
        return write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> QualityResult:
        path = Path(path)
        data = read_json(path, error=DataError,
                         fix="write it again with infertune validate --json or infertune optimize")
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            found = data.get("schema") if isinstance(data, dict) else None
            raise DataError(f"{path}: not a quality result (schema {found!r}, "
                            f"expected {SCHEMA!r})")
        try:
            return cls.from_dict(data)
        except DataError as exc:
            raise DataError(f"{path}: not a readable quality.json ({exc})") from exc


def as_floor(floor: FloorLike) -> Floor:
    if isinstance(floor, Floor):
        return floor
    if isinstance(floor, QualityFloor):
        return floor_from_config(floor)
    return _parse_floor(floor)


def compare_quality(baseline: Adapter, variant: Adapter, data: HeldOut, floor: FloorLike,
                    metrics: Sequence[str] | None = None, batch_size: int = 32, *,
                    task: str | None = None, progress: Progress | None = None,
                    resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> QualityResult:
    """Run both models on ``data`` and judge the variant against ``floor``."""
    task = task or baseline.info.task
    floor = preflight(floor, data.labels is not None, metrics, task, data.source)
    base_out = run_outputs(baseline, data.inputs, batch_size, progress, data.source)
    # before the variant costs a run: a baseline whose outputs do not vary cannot judge it
    check_outputs_vary(base_out, task, _name(baseline), data.inputs)
    var_out = run_outputs(variant, data.inputs, batch_size, progress, data.source)
    return evaluate_outputs(
        base_out, var_out, data.labels, floor, task, metrics, resamples=resamples, seed=seed,
        baseline_name=_name(baseline), variant_name=_name(variant), data_source=data.source,
        groups=data.groups,
    )


def preflight(floor: FloorLike, has_labels: bool, metrics: Sequence[str] | None = None,
              task: str | None = None, source: str = "the data") -> Floor:
    """The checks that need no model run: the floor parses, its metric (and every requested one)
    fits the task, and label metrics have labels. Returns the parsed floor."""
    floor = as_floor(floor)
    names = [floor.metric, *(metrics or [])]
    if task is not None:
        task = normalise_task(task)
        for name in names:
            metric = get_metric(name)
            if not metric.fits(task):
                raise QualityFloorError(
                    f"{metric.name} does not apply to {task!r} models; use one of "
                    f"{', '.join(default_metrics(task, has_labels))}"
                )
    _require_labels(names, has_labels, source)
    return floor


def _name(adapter: Adapter) -> str:
    info = adapter.info
    return f"{info.id} ({info.runtime}, {info.precision}, {info.version})"


def run_outputs(model: Adapter, inputs: Sequence[Any], batch_size: int = 32,
                progress: Progress | None = None, source: str = "the data") -> np.ndarray:
    """The model's postprocessed outputs for every input, stacked batch-first in input order.

    Text inputs are batched in order of length, so a batch pads to similar lengths (the results
    are put back in input order; mean pooling over the mask makes them independent of the
    padding, to float rounding)."""
    order = list(range(len(inputs)))
    if all(is_text_input(x) for x in inputs):
        order.sort(key=lambda i: text_length(inputs[i]))
    rows: list[Any] = [None] * len(inputs)
    for start in range(0, len(inputs), batch_size):
        picked = order[start:start + batch_size]
        batch = [inputs[i] for i in picked]
        feeds = model.preprocess(batch)  # raises IncompatibleInputError on the wrong kind
        try:
            raw = model.forward(feeds)
        except InfertuneError:
            raise
        except Exception as exc:  # runtimes raise untyped errors for feeds of the wrong shape
            first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
            raise IncompatibleInputError(
                f"{model.info.id} could not run on {source} (a batch with example {picked[0]}): "
                f"{type(exc).__name__} {first}; check that the data matches the model's input"
            ) from exc
        for i, row in zip(picked, model.postprocess(raw, feeds), strict=True):
            rows[i] = row
        if progress is not None:
            progress(len(batch))
    return stack_outputs(rows, model.info.id)


def stack_outputs(rows: Sequence[Any] | np.ndarray, who: str = "model") -> np.ndarray:
    try:
        return np.asarray(np.stack([np.asarray(r, dtype=np.float64) for r in rows]))
    except (ValueError, TypeError) as exc:
        raise IncompatibleInputError(
            f"{who}: outputs are not numeric arrays of one shape, so they cannot be compared"
        ) from exc


def evaluate_outputs(baseline_outputs: Sequence[Any] | np.ndarray,
                     variant_outputs: Sequence[Any] | np.ndarray, labels: Sequence[Any] | None,
                     floor: FloorLike, task: str, metrics: Sequence[str] | None = None, *,
                     resamples: int = DEFAULT_RESAMPLES,
                     set_resamples: int = DEFAULT_SET_RESAMPLES, seed: int = 0,
                     baseline_name: str = "baseline", variant_name: str = "variant",
                     data_source: str = "", groups: Sequence[Any] | None = None,
                     ) -> QualityResult:
    """Judge outputs both models already produced on the same examples, in the same order.
    ``groups``: the query of each row, for a reranker's one score per (query, passage) row;
    its ranking metrics are then per query and resampled by query."""
    floor = as_floor(floor)
    task = normalise_task(task)
    base = stack_outputs(baseline_outputs, "baseline")
    var = stack_outputs(variant_outputs, "variant")
    check_outputs_vary(base, task, baseline_name)
    if base.shape != var.shape:
        raise IncompatibleInputError(
            f"baseline outputs have shape {base.shape} but the variant's {var.shape}; a variant "
            "must produce outputs of the baseline's shape on the same examples"
        )
    if len(base) < 2:
        raise DataError("quality needs at least 2 examples to estimate a CI; pass more data")
    chosen = _select(floor, task, metrics, labels is not None, base)
    label_arr = _labels(labels, task, base) if any(m.needs_labels for m in chosen) else None
    if groups is not None and task == "reranking" and base.ndim == 1:
        if len(groups) != len(base):
            raise DataError(f"{len(groups)} query groups for {len(base)} examples; counts must "
                            "match")
        query_groups = QueryGroups.of(list(groups))
        chosen = [for_groups(m, query_groups, label_arr) for m in chosen]
    values, floor_check = [], None
    for metric in chosen:
        units = metric.units or len(base)  # query groups, or the rows
        idx = resample_indices(units, resamples, seed)
        draws = draw(metric, var, base, label_arr, idx, set_resamples)
        values.append(metric_value(metric, draws))
        if metric.name == floor.metric:
            floor_check = check_floor(floor, metric, draws, units,
                                      "queries" if metric.units else "examples")
    assert floor_check is not None
    notes = [] if labels is not None else [
        "no labels: every metric compares the variant with the baseline's outputs"]
    return QualityResult(
        floor_check.verdict, floor_check, values, task, len(base), labels is not None,
        baseline_name, variant_name, data_source, seed, resamples,
        drift(base, var, task, seed=seed), notes,
    )


def _select(floor: Floor, task: str, requested: Sequence[str] | None, has_labels: bool,
            outputs: np.ndarray) -> list[Metric]:
    n_classes = outputs.shape[1] if task == "classification" and outputs.ndim == 2 else None
    names = [floor.metric, *(requested if requested is not None
                             else default_metrics(task, has_labels, n_classes))]
    _require_labels([floor.metric, *(requested or [])], has_labels, "the data")
    chosen: dict[str, Metric] = {}
    for name in names:
        metric = get_metric(name)
        if not metric.fits(task):
            raise QualityFloorError(
                f"{metric.name} does not apply to {task!r} models; use one of "
                f"{', '.join(default_metrics(task, has_labels, n_classes))}"
            )
        if task == "reranking" and outputs.ndim == 1:
            metric = for_list_outputs(metric)
        chosen.setdefault(metric.name, metric)
    return list(chosen.values())


def _require_labels(names: Sequence[str], has_labels: bool, source: str) -> None:
    if has_labels:
        return
    for name in names:
        metric = get_metric(name)
        if metric.needs_labels:
            raise DataError(
                f"{metric.name} is scored against labels but {source} has no label column; "
                "add a 'label' to every example (or pass --label-column), or use a floor "
                "against the baseline such as 'argmax_agreement', 'mean_cosine' or "
                "'rank_agreement'"
            )


def _labels(labels: Sequence[Any] | None, task: str, outputs: np.ndarray) -> np.ndarray:
    assert labels is not None
    if len(labels) != len(outputs):
        raise DataError(f"{len(labels)} labels for {len(outputs)} examples; counts must match")
    try:
        arr = np.asarray([float(x) if task != "reranking" else x for x in labels],
                         dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"labels of a {task} model must be numbers (class indices for "
                        f"classification); got e.g. {labels[0]!r}") from exc
    if task == "classification":
        n_classes = outputs.shape[1]
        if np.any(arr != np.round(arr)) or arr.min() < 0 or arr.max() >= n_classes:
            raise DataError(f"classification labels must be class indices 0..{n_classes - 1} "
                            "(the model's output columns)")
    if task == "reranking" and arr.shape != outputs.shape:
        raise DataError(f"relevance labels have shape {arr.shape} but the scores {outputs.shape}; "
                        "give one relevance per score")
    return arr
