"""Small ONNX graphs built in tests (fixed seeds, a few KB): stand-ins for a user's own .onnx
file, for the onnxruntime passes and `optimize` on tensor models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WIDTH, HIDDEN, OUT = 16, 64, 8


def make_mlp(path: Path, op: str = "MatMul", external_data: bool = False) -> Path:
    """x[batch, 16] -> (MatMul + Add | Gemm) -> Relu -> ... -> y[batch, 8], fixed seeds."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i, (fan_in, fan_out) in enumerate([(WIDTH, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, OUT)]):
        w = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)
        b = (rng.standard_normal(fan_out) * 0.1).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        out = "y" if i == 2 else f"h{i}"
        if op == "Gemm":
            nodes.append(helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [f"lin{i}"],
                                          name=f"gemm{i}"))
        else:
            nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"mm{i}"], name=f"mm{i}"),
                      helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"lin{i}"], name=f"add{i}")]
        if i < 2:
            nodes.append(helper.make_node("Relu", [f"lin{i}"], [out], name=f"relu{i}"))
        else:
            nodes.append(helper.make_node("Identity", [f"lin{i}"], [out], name="out"))
        prev = out
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", OUT])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path), save_as_external_data=external_data,
              all_tensors_to_one_file=True, location=f"{path.name}.data", size_threshold=0)
    return path


def make_conv(path: Path) -> Path:
    """x[batch, 1, 8, 8] -> Conv(4 filters, 3x3) -> Relu -> global mean -> y[batch, 4, 1, 1]."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((4, 1, 3, 3)) / 3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="pool")]
    graph = helper.make_graph(
        nodes, "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 1, 1])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path
