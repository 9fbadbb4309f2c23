"""Quality metrics in a small typed registry: name -> Metric.

Every metric is a function of three arrays with the example axis first:

    outputs    the outputs being scored (the variant's, or the baseline's for its own score)
    reference  the baseline's outputs (metrics that compare to the baseline read this)
    labels     the held-out labels, or None

so the baseline's own score is always ``metric(baseline, baseline, labels)``: against labels that
is its real score, against the baseline it is the perfect value (cosine 1, agreement 1, diff 0).

Most metrics are a per-example value and an aggregate (mean, root-mean-square, min, max), so the
paired bootstrap in quality/floor.py resamples examples cheaply. Metrics that only exist for a
set (macro-F1, Spearman of pairwise similarities, a single ranked list) give a ``statistic``
evaluated on resampled example indices instead.

Names: ``accuracy``, ``macro_f1``, ``top_k_accuracy@5`` (also ``top5_accuracy``),
``argmax_agreement``, ``mae``, ``rmse``, ``mean_cosine`` (alias ``cosine``), ``min_cosine``,
``knn_agreement@10``, ``spearman``, ``ndcg@10``, ``mrr@10``, ``rank_agreement``,
``max_abs_diff``, ``max_rel_diff``. A family with a parameter takes ``@k``; without it, its
default k.

Reranking outputs come in three shapes: an (n_queries, n_candidates) matrix of scores (one row
a query), one score per (query, passage) row with the rows grouped by query (``for_groups``:
one value per query, so the paired bootstrap resamples queries, not rows), or one score per
row with no groups (``for_list_outputs``: the whole set is one ranked list).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.stats import spearmanr

from infertune.errors import QualityFloorError

Aggregate = Literal["mean", "rms", "min", "max"]
PerExample = Callable[[np.ndarray, np.ndarray, "np.ndarray | None"], np.ndarray]
Statistic = Callable[[np.ndarray, np.ndarray, "np.ndarray | None", np.ndarray], float]

TASKS = ("classification", "regression", "embedding", "reranking", "other")
TASK_ALIASES = {"ranking": "reranking"}
ANY = "any"


@dataclass(frozen=True)
class Metric:
    """One concrete metric (``k`` already bound). Exactly one of per_example / statistic."""

    name: str
    tasks: frozenset[str]  # the tasks it fits; {"any"} for every task
    needs_labels: bool
    higher_is_better: bool
    description: str
    per_example: PerExample | None = None
    aggregate: Aggregate = "mean"
    statistic: Statistic | None = None
    units: int | None = None  # what the bootstrap resamples when not the rows: query groups

    @property
    def vs(self) -> str:
        """What the metric scores against: "labels" or "baseline"."""
        return "labels" if self.needs_labels else "baseline"

    @property
    def extreme(self) -> bool:
        """A minimum or maximum over examples: its bootstrap CI is unreliable (a resample can
        never go past the observed extreme), so floors on it are judged differently."""
        return self.aggregate in ("min", "max")

    def fits(self, task: str) -> bool:
        return ANY in self.tasks or task in self.tasks

    def value(self, outputs: np.ndarray, reference: np.ndarray,
              labels: np.ndarray | None) -> float:
        """The metric over all examples."""
        idx = np.arange(len(outputs))
        if self.statistic is not None:
            return float(self.statistic(outputs, reference, labels, idx))
        assert self.per_example is not None
        return float(aggregate(self.per_example(outputs, reference, labels), self.aggregate))


def aggregate(values: np.ndarray, how: Aggregate, axis: int = -1) -> np.ndarray:
    if how == "mean":
        return values.mean(axis=axis)
    if how == "rms":
        return np.sqrt((values**2).mean(axis=axis))
    if how == "min":
        return values.min(axis=axis)
    return values.max(axis=axis)


# ---------------------------------------------------------------- per-example functions


def _classes(labels: np.ndarray | None) -> np.ndarray:
    assert labels is not None
    return labels.astype(np.int64)


def _correct(outputs: np.ndarray, _ref: np.ndarray, labels: np.ndarray | None) -> np.ndarray:
    return (outputs.argmax(axis=1) == _classes(labels)).astype(np.float64)


def _top_k_correct(k: int) -> PerExample:
    def fn(outputs: np.ndarray, _ref: np.ndarray, labels: np.ndarray | None) -> np.ndarray:
        kk = min(k, outputs.shape[1])
        top = np.argpartition(-outputs, kk - 1, axis=1)[:, :kk]
        return (top == _classes(labels)[:, None]).any(axis=1).astype(np.float64)

    return fn


def _argmax_agree(outputs: np.ndarray, ref: np.ndarray, _labels: np.ndarray | None) -> np.ndarray:
    return (outputs.argmax(axis=1) == ref.argmax(axis=1)).astype(np.float64)


def _abs_error(outputs: np.ndarray, _ref: np.ndarray, labels: np.ndarray | None) -> np.ndarray:
    assert labels is not None
    return np.abs(outputs.reshape(len(outputs), -1)[:, 0] - labels.astype(np.float64))


def _unit(x: np.ndarray) -> np.ndarray:
    flat = x.reshape(len(x), -1).astype(np.float64)
    return flat / np.clip(np.linalg.norm(flat, axis=1, keepdims=True), 1e-12, None)


def _cosine(outputs: np.ndarray, ref: np.ndarray, _labels: np.ndarray | None) -> np.ndarray:
    return np.clip((_unit(outputs) * _unit(ref)).sum(axis=1), -1.0, 1.0)


def _knn_sets(x: np.ndarray, k: int) -> np.ndarray:
    """Boolean (n, n): row i marks its k nearest neighbours by cosine, itself excluded."""
    unit = _unit(x)
    sims = unit @ unit.T
    np.fill_diagonal(sims, -np.inf)
    top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    marks = np.zeros(sims.shape, dtype=bool)
    np.put_along_axis(marks, top, True, axis=1)
    return marks


def _knn_agree(k: int) -> PerExample:
    def fn(outputs: np.ndarray, ref: np.ndarray, _labels: np.ndarray | None) -> np.ndarray:
        n = len(outputs)
        if n < 2:
            raise QualityFloorError(
                f"knn_agreement@{k} needs at least 2 examples; pass a larger --data file"
            )
        kk = min(k, n - 1)
        shared = _knn_sets(outputs, kk) & _knn_sets(ref, kk)
        return shared.sum(axis=1) / kk

    return fn


def _max_abs(outputs: np.ndarray, ref: np.ndarray, _labels: np.ndarray | None) -> np.ndarray:
    diff = np.abs(outputs.reshape(len(outputs), -1).astype(np.float64)
                  - ref.reshape(len(ref), -1).astype(np.float64))
    return diff.max(axis=1)


def _max_rel(outputs: np.ndarray, ref: np.ndarray, _labels: np.ndarray | None) -> np.ndarray:
    out = outputs.reshape(len(outputs), -1).astype(np.float64)
    base = ref.reshape(len(ref), -1).astype(np.float64)
    # elements below 0.1% of the row's largest magnitude are divided by that floor instead,
    # so a near-zero baseline element does not turn a tiny absolute error into a huge ratio
    floor = np.clip(1e-3 * np.abs(base).max(axis=1, keepdims=True), 1e-12, None)
    return (np.abs(out - base) / np.maximum(np.abs(base), floor)).max(axis=1)


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    if np.array_equal(a, b):
        return 1.0
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return 0.0  # a constant side has no ranking to agree with
    return float(spearmanr(a, b).statistic)


def _ndcg_row(scores: np.ndarray, rel: np.ndarray, k: int) -> float:
    kk = min(k, len(scores))
    discounts = 1.0 / np.log2(np.arange(2, kk + 2))
    order = np.argsort(-scores, kind="stable")[:kk]
    ideal = np.sort(rel)[::-1][:kk]
    best = float((ideal * discounts).sum())
    return float((rel[order] * discounts).sum()) / best if best > 0 else 0.0


def _mrr_row(scores: np.ndarray, rel: np.ndarray, k: int) -> float:
    """1 / the rank of the first relevant (label > 0) item in the top k by score; 0 if none."""
    order = np.argsort(-scores, kind="stable")[: min(k, len(scores))]
    hits = np.flatnonzero(rel[order] > 0)
    return 1.0 / (hits[0] + 1) if len(hits) else 0.0


def _mrr_rows(k: int) -> PerExample:
    def fn(outputs: np.ndarray, _ref: np.ndarray, labels: np.ndarray | None) -> np.ndarray:
        assert labels is not None
        return np.array([_mrr_row(o, r, k) for o, r in zip(outputs, labels, strict=True)])

    return fn


def _ndcg_rows(k: int) -> PerExample:
    def fn(outputs: np.ndarray, _ref: np.ndarray, labels: np.ndarray | None) -> np.ndarray:
        assert labels is not None
        return np.array([_ndcg_row(o, r, k) for o, r in zip(outputs, labels, strict=True)])

    return fn


def _rank_agree_rows(outputs: np.ndarray, ref: np.ndarray, _l: np.ndarray | None) -> np.ndarray:
    return np.array([_spearman(o, r) for o, r in zip(outputs, ref, strict=True)])


# ---------------------------------------------------------------- set-level statistics


def _macro_f1(outputs: np.ndarray, _ref: np.ndarray, labels: np.ndarray | None,
              idx: np.ndarray) -> float:
    n_classes = outputs.shape[1]
    pred = outputs.argmax(axis=1)[idx]
    true = _classes(labels)[idx]
    hit = pred == true
    tp = np.bincount(true[hit], minlength=n_classes)
    pred_n = np.bincount(pred, minlength=n_classes)
    true_n = np.bincount(true, minlength=n_classes)
    present = (pred_n + true_n) > 0  # classes seen in the labels or the predictions
    f1 = 2 * tp[present] / (pred_n[present] + true_n[present])
    return float(f1.mean())


def _pairwise_spearman(outputs: np.ndarray, ref: np.ndarray, _labels: np.ndarray | None,
                       idx: np.ndarray) -> float:
    # pairs among distinct examples: a duplicated example would add self-pairs of cosine 1
    unique = np.unique(idx)
    if len(unique) < 3:
        return 1.0 if np.array_equal(outputs[unique], ref[unique]) else 0.0
    upper = np.triu_indices(len(unique), k=1)
    sims_out = (_unit(outputs[unique]) @ _unit(outputs[unique]).T)[upper]
    sims_ref = (_unit(ref[unique]) @ _unit(ref[unique]).T)[upper]
    return _spearman(sims_out, sims_ref)


def _ndcg_list(k: int) -> Statistic:
    def fn(outputs: np.ndarray, _ref: np.ndarray, labels: np.ndarray | None,
           idx: np.ndarray) -> float:
        assert labels is not None
        return _ndcg_row(outputs.reshape(len(outputs))[idx], labels.astype(np.float64)[idx], k)

    return fn


def _rank_agree_list(outputs: np.ndarray, ref: np.ndarray, _labels: np.ndarray | None,
                     idx: np.ndarray) -> float:
    return _spearman(outputs.reshape(len(outputs))[idx], ref.reshape(len(ref))[idx])


def _mrr_list(k: int) -> Statistic:
    def fn(outputs: np.ndarray, _ref: np.ndarray, labels: np.ndarray | None,
           idx: np.ndarray) -> float:
        assert labels is not None
        return _mrr_row(outputs.reshape(len(outputs))[idx], labels.astype(np.float64)[idx], k)

    return fn


# ---------------------------------------------------------------- the registry

Builder = Callable[[int], Metric]
CLS, REG, EMB, RANK = (frozenset({t}) for t in ("classification", "regression", "embedding",
                                                 "reranking"))


@dataclass(frozen=True)
class MetricFamily:
    """A metric name with an optional integer parameter ``@k`` (default_k None: takes none)."""

    base: str
    build: Builder
    default_k: int | None = None


def _fixed(metric: Metric) -> MetricFamily:
    return MetricFamily(metric.name, lambda _k: metric)


def _ranking_ndcg(k: int) -> Metric:
    # reranker outputs are either one score per (query, candidate) row — the whole held-out
    # set is then one ranked list — or an (n_queries, n_candidates) matrix of scores
    return Metric(f"ndcg@{k}", RANK, True, True, f"NDCG@{k} of the scores against relevance "
                  "labels (linear gain, log2 discount)", per_example=_ndcg_rows(k),
                  statistic=None)


REGISTRY: dict[str, MetricFamily] = {
    f.base: f for f in [
        _fixed(Metric("accuracy", CLS, True, True, "share of examples whose argmax is the label",
                      per_example=_correct)),
        _fixed(Metric("macro_f1", CLS, True, True, "F1 averaged over classes (unweighted)",
                      statistic=_macro_f1)),
        MetricFamily("top_k_accuracy", lambda k: Metric(
            f"top_k_accuracy@{k}", CLS, True, True, f"share with the label in the top {k}",
            per_example=_top_k_correct(k)), default_k=5),
        _fixed(Metric("argmax_agreement", CLS, False, True,
                      "share of examples whose argmax matches the baseline's",
                      per_example=_argmax_agree)),
        _fixed(Metric("mae", REG, True, False, "mean absolute error to the labels",
                      per_example=_abs_error)),
        _fixed(Metric("rmse", REG, True, False, "root-mean-square error to the labels",
                      per_example=_abs_error, aggregate="rms")),
        _fixed(Metric("mean_cosine", EMB, False, True,
                      "mean cosine similarity to the baseline's embedding of the same input",
                      per_example=_cosine)),
        _fixed(Metric("min_cosine", EMB, False, True,
                      "lowest cosine similarity to the baseline's embedding",
                      per_example=_cosine, aggregate="min")),
        MetricFamily("knn_agreement", lambda k: Metric(
            f"knn_agreement@{k}", EMB, False, True,
            f"mean share of each example's {k} nearest held-out neighbours that the baseline "
            "also has among its nearest", per_example=_knn_agree(k)), default_k=10),
        _fixed(Metric("spearman", EMB, False, True, "Spearman correlation of all pairwise "
                      "cosine similarities with the baseline's", statistic=_pairwise_spearman)),
        MetricFamily("ndcg", _ranking_ndcg, default_k=10),
        MetricFamily("mrr", lambda k: Metric(
            f"mrr@{k}", RANK, True, True, f"mean reciprocal rank of the first relevant "
            f"(label > 0) item in the top {k}", per_example=_mrr_rows(k)), default_k=10),
        _fixed(Metric("rank_agreement", RANK, False, True,
                      "Spearman correlation of the scores with the baseline's",
                      per_example=_rank_agree_rows)),
        _fixed(Metric("max_abs_diff", frozenset({ANY}), False, False,
                      "largest absolute output difference to the baseline", per_example=_max_abs,
                      aggregate="max")),
        _fixed(Metric("max_rel_diff", frozenset({ANY}), False, False,
                      "largest relative output difference to the baseline", per_example=_max_rel,
                      aggregate="max")),
    ]
}
ALIASES = {"cosine": "mean_cosine"}
_NAME = re.compile(r"^(?P<base>[a-z_0-9]+?)(?:@(?P<k>\d+))?$")
_TOPN = re.compile(r"^top(?P<k>\d+)_accuracy$")


def known_names(registry: dict[str, MetricFamily] = REGISTRY) -> list[str]:
    names = [f"{f.base}@k" if f.default_k is not None else f.base for f in registry.values()]
    return names + [f"{alias} (= {name})" for alias, name in ALIASES.items()]


def get_metric(name: str, registry: dict[str, MetricFamily] = REGISTRY) -> Metric:
    """Parse a metric name ("ndcg@10", "top5_accuracy", "cosine") into a Metric."""
    text = name.strip().lower()
    top = _TOPN.match(text)
    if top:
        text = f"top_k_accuracy@{top['k']}"
    match = _NAME.match(text)
    base = ALIASES.get(match["base"], match["base"]) if match else None
    family = registry.get(base) if base else None
    if match is None or family is None:
        raise QualityFloorError(
            f"unknown quality metric {name!r}; known metrics: {', '.join(known_names(registry))}"
        )
    if match["k"] is not None and family.default_k is None:
        raise QualityFloorError(f"metric {family.base!r} takes no '@k'; write {family.base!r}")
    k = int(match["k"]) if match["k"] is not None else family.default_k
    if k is not None and k < 1:
        raise QualityFloorError(f"{name!r}: k must be >= 1, e.g. '{family.base}@10'")
    return family.build(k if k is not None else 0)


def normalise_task(task: str) -> str:
    task = TASK_ALIASES.get(task, task)
    if task not in TASKS:
        raise QualityFloorError(f"unknown task {task!r}; use one of {', '.join(TASKS)}")
    return task


def default_metrics(task: str, has_labels: bool, n_classes: int | None = None) -> list[str]:
    """The metrics reported for a task besides the floor's (label metrics only with labels)."""
    by_task = {
        "classification": ["accuracy", "macro_f1", "argmax_agreement", "max_abs_diff"],
        "regression": ["mae", "rmse", "max_abs_diff", "max_rel_diff"],
        "embedding": ["mean_cosine", "min_cosine", "knn_agreement@10", "spearman",
                      "max_abs_diff"],
        "reranking": ["ndcg@10", "mrr@10", "rank_agreement", "max_abs_diff"],
        "other": ["max_abs_diff", "max_rel_diff"],
    }
    names = by_task[normalise_task(task)]
    if task == "classification" and n_classes is not None and n_classes > 5:
        names.insert(1, "top_k_accuracy@5")
    return [n for n in names if has_labels or not get_metric(n).needs_labels]


def for_list_outputs(metric: Metric) -> Metric:
    """Reranking metrics on one score per example treat the whole set as one ranked list."""
    if metric.name.startswith("ndcg@"):
        k = int(metric.name.split("@")[1])
        return Metric(metric.name, metric.tasks, True, True, metric.description,
                      statistic=_ndcg_list(k))
    if metric.name.startswith("mrr@"):
        k = int(metric.name.split("@")[1])
        return Metric(metric.name, metric.tasks, True, True, metric.description,
                      statistic=_mrr_list(k))
    if metric.name == "rank_agreement":
        return Metric(metric.name, metric.tasks, False, True, metric.description,
                      statistic=_rank_agree_list)
    return metric


GROUPED = ("ndcg@", "mrr@", "rank_agreement")


@dataclass(frozen=True)
class QueryGroups:
    """Row indices per query (groups of one score per (query, passage) row), in first-seen
    order. A ranking metric is computed within each group; groups a metric cannot score (one
    passage has no order to agree on, no relevant passage has no NDCG) are left out of it."""

    members: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, keys: Sequence[object]) -> QueryGroups:
        index: dict[object, list[int]] = {}
        for row, key in enumerate(keys):
            index.setdefault(key, []).append(row)
        return cls(tuple(np.asarray(rows, dtype=np.int64) for rows in index.values()))

    def __len__(self) -> int:
        return len(self.members)


def for_groups(metric: Metric, groups: QueryGroups, labels: np.ndarray | None) -> Metric:
    """A ranking metric on one score per row, computed per query group: its per-example
    values are per query, so the bootstrap resamples queries. Other metrics are unchanged."""
    if not metric.name.startswith(GROUPED):
        return metric
    if metric.needs_labels:
        assert labels is not None
        kept = [g for g in groups.members if np.any(labels[g] > 0)]
    else:
        kept = [g for g in groups.members if len(g) >= 2]
    if not kept:
        raise QualityFloorError(
            f"{metric.name} needs query groups with "
            + ("a relevant passage (label > 0)" if metric.needs_labels else "two passages or more")
            + "; the held-out data has none; add such queries or use another floor")
    k = int(metric.name.split("@")[1]) if "@" in metric.name else 0
    row = {"ndcg": _ndcg_row, "mrr": _mrr_row}.get(metric.name.split("@")[0])

    def per_group(outputs: np.ndarray, ref: np.ndarray, labs: np.ndarray | None) -> np.ndarray:
        flat = outputs.reshape(len(outputs))
        if row is None:  # rank agreement with the baseline's order within the query
            base = ref.reshape(len(ref))
            return np.array([_spearman(flat[g], base[g]) for g in kept])
        assert labs is not None
        return np.array([row(flat[g], labs[g].astype(np.float64), k) for g in kept])

    note = f"{metric.description}; per query ({len(kept)} of {len(groups)} queries)"
    return Metric(metric.name, metric.tasks, metric.needs_labels, metric.higher_is_better,
                  note, per_example=per_group, units=len(kept))
