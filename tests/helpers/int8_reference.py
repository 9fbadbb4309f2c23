"""What onnxruntime's dynamic INT8 should compute, simulated in numpy, so a test's tolerance
follows the scheme's own quantization error instead of one CPU's result.

For each MatMul with a constant weight: activations quantized per tensor to uint8 (asymmetric,
range widened to hold 0, as DynamicQuantizeLinear does), weights per output column (or per
tensor) to the scheme's type and range, an exact integer product, then dequantized. Everything
else runs in float. A kernel that saturates (U8S8 at full range without VNNI) lands far outside
this model's error; one that does not lands on it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper


def _quant_params(lo: np.ndarray, hi: np.ndarray, qmin: int, qmax: int,
                  symmetric: bool) -> tuple[np.ndarray, np.ndarray]:
    if symmetric:
        absmax = np.maximum(np.abs(lo), np.abs(hi))
        lo, hi = -absmax, absmax
    else:
        lo, hi = np.minimum(lo, 0.0), np.maximum(hi, 0.0)
    scale = (hi - lo) / (qmax - qmin)
    scale = np.where(scale == 0, 1.0, scale)
    zero = np.zeros_like(scale) if symmetric else np.clip(np.rint(qmin - lo / scale), qmin, qmax)
    return scale, zero


def _quantize(x: np.ndarray, scale: np.ndarray, zero: np.ndarray, qmin: int,
              qmax: int) -> np.ndarray:
    return np.clip(np.rint(x / scale) + zero, qmin, qmax)


def _int8_matmul(x: np.ndarray, w: np.ndarray, weight_type: str, reduce_range: bool,
                 per_channel: bool) -> np.ndarray:
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    sx, zx = _quant_params(x.min(), x.max(), 0, 255, symmetric=False)
    qx = _quantize(x, sx, zx, 0, 255)
    if weight_type == "int8":
        qmin, qmax, symmetric = (-64, 64, True) if reduce_range else (-127, 127, True)
    else:
        qmin, qmax, symmetric = (0, 127, False) if reduce_range else (0, 255, False)
    lo, hi = (w.min(axis=0), w.max(axis=0)) if per_channel else (w.min(), w.max())
    sw, zw = _quant_params(np.asarray(lo), np.asarray(hi), qmin, qmax, symmetric)
    qw = _quantize(w, sw, zw, qmin, qmax)
    return ((qx - zx) @ (qw - zw)) * sx * sw


def simulate_dynamic_int8(model_path: Path, x: np.ndarray, *, weight_type: str,
                          reduce_range: bool, per_channel: bool) -> np.ndarray:
    """A graph of MatMul/Gemm with constant weights, Add, Relu and Identity (the MLPs of
    onnx_graphs.make_mlp and of a torch export) run with the scheme the variant recorded."""
    graph = onnx.load(str(model_path)).graph
    consts = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    values: dict[str, np.ndarray] = {graph.input[0].name: x.astype(np.float64)}
    for node in graph.node:
        ins = [values[n] if n in values else consts[n] for n in node.input]
        if node.op_type == "MatMul" and node.input[1] in consts:
            out = _int8_matmul(ins[0], ins[1], weight_type, reduce_range, per_channel)
        elif node.op_type == "Gemm" and node.input[1] in consts:
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            w = ins[1].T if attrs.get("transB", 0) else ins[1]
            out = attrs.get("alpha", 1.0) * _int8_matmul(ins[0], w, weight_type, reduce_range,
                                                        per_channel)
            if len(ins) > 2:
                out = out + attrs.get("beta", 1.0) * ins[2]
        elif node.op_type == "Add":
            out = ins[0] + ins[1]
        elif node.op_type == "Relu":
            out = np.maximum(ins[0], 0.0)
        elif node.op_type == "Identity":
            out = ins[0]
        else:
            raise NotImplementedError(f"simulate_dynamic_int8: no model of {node.op_type}")
        values[node.output[0]] = out
    return values[graph.output[0].name]
