"""QualityResult round trips; evaluate_outputs refuses mismatched inputs in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from infertune.errors import DataError, IncompatibleInputError, QualityFloorError
from infertune.quality import QualityResult, evaluate_outputs
from infertune.quality.validate import preflight


def embedding_result() -> QualityResult:
    rng = np.random.default_rng(0)
    base = rng.standard_normal((40, 16))
    return evaluate_outputs(base, base + 0.05 * rng.standard_normal(base.shape), None,
                            "cosine>=0.99", "embedding", data_source="unit")


def test_result_round_trips_through_dict_and_file(tmp_path: Path) -> None:
    result = embedding_result()
    assert QualityResult.from_dict(result.to_dict()) == result
    path = result.save(tmp_path / "variant" / "quality.json")
    assert QualityResult.load(path) == result


def test_embedding_results_always_report_neighbour_agreement() -> None:
    result = embedding_result()
    names = [m.name for m in result.metrics]
    assert names == ["mean_cosine", "min_cosine", "knn_agreement@10", "spearman",
                     "max_abs_diff"]
    assert 0.0 < result.metric("knn_agreement@10").value < 1.0
    assert result.notes == ["no labels: every metric compares the variant with the "
                            "baseline's outputs"]


def test_load_refuses_other_json(tmp_path: Path) -> None:
    path = tmp_path / "quality.json"
    path.write_text('{"schema": "something/v9"}')
    with pytest.raises(DataError, match="not a quality result"):
        QualityResult.load(path)


def test_mismatched_inputs_are_one_line_errors() -> None:
    base = np.arange(12.0).reshape(4, 3)
    with pytest.raises(IncompatibleInputError, match="shape"):
        evaluate_outputs(base, np.zeros((4, 2)), None, "max_abs_diff<=1", "other")
    with pytest.raises(DataError, match="accuracy is scored against labels"):
        evaluate_outputs(base, base, None, "accuracy drop<=0.01", "classification")
    with pytest.raises(QualityFloorError,
                       match="mean_cosine does not apply to 'classification' models"):
        evaluate_outputs(base, base, None, "cosine>=0.9", "classification")
    with pytest.raises(DataError, match="class indices 0..2"):
        evaluate_outputs(base, base, [0, 1, 2, 5], "accuracy drop<=0.01", "classification")
    with pytest.raises(DataError, match="must be numbers"):
        evaluate_outputs(base, base, ["cat"] * 4, "accuracy drop<=0.01", "classification")
    with pytest.raises(QualityFloorError, match="unknown task"):
        evaluate_outputs(base, base, None, "max_abs_diff<=1", "vision")


def test_preflight_checks_requested_metrics_too() -> None:
    assert preflight("cosine>=0.99", False, None, "embedding").metric == "mean_cosine"
    with pytest.raises(DataError, match="macro_f1 is scored against labels"):
        preflight("argmax_agreement>=0.9", False, ["macro_f1"], "classification")


def test_reranker_scores_as_one_ranked_list() -> None:
    rng = np.random.default_rng(0)
    relevance = rng.integers(0, 3, 60).astype(float)
    base = relevance + 0.1 * rng.standard_normal(60)  # one score per (query, document) row
    result = evaluate_outputs(base, base + 0.01, list(relevance), "ndcg@10 drop<=0.01",
                              "ranking")
    assert result.task == "reranking" and result.verdict == "pass"
    ndcg = result.metric("ndcg@10")
    assert ndcg.value == ndcg.baseline_value == 1.0  # a constant shift keeps the order
    assert result.metric("rank_agreement").value == 1.0
    shuffled = rng.permutation(base)
    assert evaluate_outputs(base, shuffled, list(relevance), "ndcg@10 drop<=0.01",
                            "reranking").verdict == "fail"


def test_lower_is_better_drop_is_a_rise() -> None:
    labels = np.linspace(0, 1, 100)
    base = (labels + 0.01)[:, None]
    worse = (labels + 0.2)[:, None]
    result = evaluate_outputs(base, worse, list(labels), "mae drop<=0.05", "regression")
    assert result.verdict == "fail"
    assert result.floor_check.estimate == pytest.approx(0.19)
    assert result.metric("rmse").value == pytest.approx(0.2)
    assert evaluate_outputs(base, base, list(labels), "mae<=0.02", "regression").verdict == "pass"


class FailingRunner:
    """A runtime that rejects its feeds the way ONNX Runtime and torch do: an untyped error."""

    runtime = "onnxruntime"
    precision = "fp32"
    input_names = ["input"]

    def __call__(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        raise RuntimeError("Got invalid dimensions for input: input\nindex: 1 Got: 5 Expected: 4")


def test_runtime_errors_on_the_data_become_one_line() -> None:
    from infertune.models import ModelInfo, TensorAdapter
    from infertune.quality import run_outputs

    info = ModelInfo(id="tiny", version="0", kind="tensor", task="other",
                     runtime="onnxruntime", input_names=["input"])
    model = TensorAdapter(info, FailingRunner(), {"input": np.zeros(4, np.float32)})
    with pytest.raises(IncompatibleInputError) as err:
        run_outputs(model, [np.zeros(4)] * 3, source="d.jsonl")
    assert str(err.value) == (
        "tiny could not run on d.jsonl (a batch with example 0): RuntimeError Got invalid "
        "dimensions for input: input; check that the data matches the model's input")


class LengthModel:
    """A fake text model whose output is the length of its input; records its batches."""

    def __init__(self) -> None:
        from infertune.models import ModelInfo

        self.info = ModelInfo(id="length", version="0", kind="text", task="other",
                              runtime="torch")
        self.batches: list[list[str]] = []

    def preprocess(self, raw: list[str]) -> dict[str, np.ndarray]:
        self.batches.append(list(raw))
        return {"n": np.array([len(t) for t in raw], dtype=np.float64)}

    def forward(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        return inputs["n"][:, None]

    def postprocess(self, outputs: np.ndarray, inputs: dict[str, np.ndarray]) -> list:
        return list(outputs)


def test_text_is_batched_by_length_and_returned_in_input_order() -> None:
    from infertune.quality import run_outputs

    texts = ["aaaa", "a", "aaaaaa", "aa", "aaaaa", "aaa"]
    model = LengthModel()
    out = run_outputs(model, texts, batch_size=2)  # type: ignore[arg-type]
    assert out[:, 0].tolist() == [4, 1, 6, 2, 5, 3]
    assert model.batches == [["a", "aa"], ["aaa", "aaaa"], ["aaaaa", "aaaaaa"]]
