"""Triton Python-backend model: the model's raw output in, the answer `infertune serve` gives
out, as TextAdapter.postprocess computes it (models/text.py): embeddings are mean-pooled over
real tokens and L2-normalised, classification logits become probabilities, reranking and
regression scores are the first column. The task comes from ``postprocess.json`` beside this
file. The arithmetic is repeated here, not imported, because Triton's Python environment has
no infertune; a test compares both on the same arrays.

Inputs ``OUTPUT_RAW`` (the ONNX model's output, batch first) and ``attention_mask``; output
``OUTPUT`` (TYPE_FP32, batch first).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils


def mean_pool_normalise(token_states: np.ndarray, mask: np.ndarray) -> np.ndarray:
    weights = mask[..., None].astype(np.float32)
    pooled = (token_states.astype(np.float32) * weights).sum(axis=1)
    pooled /= np.clip(weights.sum(axis=1), 1e-9, None)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    result: np.ndarray = pooled / np.clip(norms, 1e-12, None)
    return result


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    result: np.ndarray = exp / exp.sum(axis=-1, keepdims=True)
    return result


def postprocess(task: str, raw: np.ndarray, mask: np.ndarray) -> np.ndarray:
    if task == "embedding":
        return mean_pool_normalise(raw, mask)
    if task == "classification":
        return softmax(raw).astype(np.float32)
    if task in ("reranking", "regression"):
        return raw.reshape(len(raw), -1)[:, :1].astype(np.float32)
    return raw.astype(np.float32)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        here = Path(args["model_repository"]) / args["model_version"]
        self.task = json.loads((here / "postprocess.json").read_text())["task"]

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "OUTPUT_RAW").as_numpy()
            mask = pb_utils.get_input_tensor_by_name(request, "attention_mask").as_numpy()
            result = postprocess(self.task, raw, mask)
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT", result)]))
        return responses
