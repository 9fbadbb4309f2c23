"""`infertune validate` on tiny seeded ONNX models (built here, no torch): exit codes, JSON
output, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from infertune.cli import main
from infertune.quality import QualityResult


def write_linear(path: Path, noise: float) -> str:
    """A tiny seeded ONNX model, output = input @ W + b (4 -> 3), with ``noise`` added to W."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = rng.standard_normal((4, 3)).astype(np.float32)
    weight += noise * rng.standard_normal((4, 3)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input", "W"], ["xw"]),
         helper.make_node("Add", ["xw", "b"], ["output"])],
        "linear",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


@pytest.fixture
def models(tmp_path: Path) -> tuple[str, str]:
    return write_linear(tmp_path / "baseline.onnx", 0.0), write_linear(tmp_path / "noisy.onnx",
                                                                       0.5)


def write_data(path: Path, width: int = 4, labels: bool = True, n: int = 60) -> Path:
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n):
        row: dict[str, object] = {"input": rng.standard_normal(width).round(4).tolist()}
        if labels:
            row["label"] = i % 3
        rows.append(json.dumps(row))
    path.write_text("\n".join(rows) + "\n")
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["validate", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_identical_models_pass_and_write_json(tmp_path: Path, models: tuple[str, str],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    BASE, _ = models
    data = write_data(tmp_path / "d.jsonl")
    out_json = tmp_path / "q.json"
    rc, out, _ = run(capsys, BASE, BASE, "--data", str(data), "--task", "classification",
                     "--floor", "accuracy drop<=0.01", "--json", str(out_json))
    assert rc == 0
    assert "verdict: PASS for accuracy drop<=0.01" in out
    result = QualityResult.load(out_json)
    assert result.verdict == "pass" and result.n_examples == 60 and result.has_labels
    assert result.metric("argmax_agreement").value == 1.0


def test_degraded_variant_fails_with_one_line(tmp_path: Path, models: tuple[str, str],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    BASE, NOISY = models
    data = write_data(tmp_path / "d.jsonl", labels=False)
    out_json = tmp_path / "q.json"
    rc, _, err = run(capsys, BASE, NOISY, "--data", str(data), "--floor", "max_abs_diff<=0.01",
                     "--json", str(out_json))
    assert rc == 1
    assert err.startswith("error: quality floor not met: max_abs_diff = ")
    assert err.count("\n") == 1
    assert QualityResult.load(out_json).verdict == "fail"  # written before exiting


def test_floor_from_a_scenario(tmp_path: Path, models: tuple[str, str],
                               capsys: pytest.CaptureFixture[str]) -> None:
    BASE, _ = models
    scenario = tmp_path / "s.yaml"
    scenario.write_text("constraints:\n  quality_floor: {metric: argmax_agreement, min: 0.95}\n")
    data = write_data(tmp_path / "d.jsonl", labels=False)
    rc, out, _ = run(capsys, BASE, BASE, "--data", str(data), "--task", "classification",
                     "--scenario", str(scenario))
    assert rc == 0 and "argmax_agreement>=0.95" in out


@pytest.mark.parametrize(("args", "message"), [
    (["--floor", "bleu>=0.3"], "error: unknown quality metric 'bleu'; known metrics: accuracy"),
    (["--floor", "accuracy drop<=0.01", "--task", "classification"],
     "error: accuracy is scored against labels but"),
    (["--floor", "max_abs_diff<=1", "--data-width", "5"],
     "error: baseline: example 0 input 'input' has shape (5,); the model takes (4,)"),
    (["--floor", "max_abs_diff<=1", "--text-data"], "error: baseline: example 0 input 'input' "
     "is not numeric"),
    ([], "error: no quality floor given; pass --floor"),
])
def test_bad_input_is_one_line_exit_1(tmp_path: Path, models: tuple[str, str],
                                      capsys: pytest.CaptureFixture[str],
                                      args: list[str], message: str) -> None:
    BASE, NOISY = models
    width = 5 if "--data-width" in args else 4
    args = [a for a in args if a not in ("--data-width", "5")]
    data = write_data(tmp_path / "d.jsonl", width=width, labels=False)
    if "--text-data" in args:
        args.remove("--text-data")
        data.write_text('{"input": "some text"}\n{"input": "more text"}\n')
    rc, out, err = run(capsys, BASE, NOISY, "--data", str(data), *args)
    assert rc == 1
    assert err.startswith(message)
    assert err.count("\n") == 1
    assert out == ""


def test_data_is_required_for_models_without_a_bundled_set(
        models: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    BASE, NOISY = models
    rc, _, err = run(capsys, BASE, NOISY, "--floor", "max_abs_diff<=1")
    assert rc == 1 and err.startswith(f"error: --data is required for {BASE!r}")


def test_onnx_precision_is_read_from_the_graph(models: tuple[str, str], tmp_path: Path) -> None:
    from onnxruntime.quantization import quantize_dynamic

    from infertune.cli.validate import _onnx_precision

    base, _ = models
    assert _onnx_precision(Path(base)) == "fp32"
    quantized = tmp_path / "int8.onnx"
    quantize_dynamic(base, str(quantized))
    assert _onnx_precision(quantized) == "int8"
