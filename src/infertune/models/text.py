"""TextAdapter: a tokenizer in front of a Runner, with task-specific postprocessing.

Embedding postprocessing is sentence-transformers' mean pooling over real (unmasked) tokens
followed by L2 normalisation, so the output matches what all-MiniLM-L6-v2 users get.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from infertune.errors import IncompatibleInputError
from infertune.models.base import ModelInfo, ModelInputs, Runner

Padding = Literal["longest", "max_length", "bucket"]


@dataclass(frozen=True)
class TextPreprocess:
    """How raw text becomes token arrays. ``bucket`` pads each batch up to the next bucket
    length, so a compiled or cached graph sees few distinct shapes."""

    max_length: int = 256
    padding: Padding = "longest"
    buckets: tuple[int, ...] = (16, 32, 64, 128, 256, 512)

    def padded_length(self, longest: int) -> int:
        if self.padding == "max_length":
            return self.max_length
        if self.padding == "bucket":
            fitting = [b for b in self.buckets if b >= longest]
            return min(min(fitting) if fitting else self.max_length, self.max_length)
        return longest


@dataclass
class TextAdapter:
    info: ModelInfo
    runner: Runner
    tokenizer: Any  # a transformers fast tokenizer
    pre: TextPreprocess = field(default_factory=TextPreprocess)

    def preprocess(self, raw: Sequence[Any]) -> ModelInputs:
        if isinstance(raw, str) or not isinstance(raw, Sequence) or len(raw) == 0:
            raise IncompatibleInputError(
                f"{self.info.id} takes a non-empty list of strings; got {type(raw).__name__}"
            )
        for i, item in enumerate(raw):
            if not isinstance(item, str):
                raise IncompatibleInputError(
                    f"{self.info.id} takes text; input {i} is {type(item).__name__}, not a string"
                )
        encoded = self.tokenizer(
            list(raw), truncation=True, max_length=self.pre.max_length,
            padding=False, return_attention_mask=False,
        )["input_ids"]
        longest = max(len(ids) for ids in encoded)
        width = self.pre.padded_length(longest)
        pad_id = self.tokenizer.pad_token_id or 0
        ids = np.full((len(encoded), width), pad_id, dtype=np.int64)
        mask = np.zeros((len(encoded), width), dtype=np.int64)
        for row, seq in enumerate(encoded):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.runner.input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        return feeds

    def forward(self, inputs: ModelInputs) -> np.ndarray:
        return self.runner(inputs)

    def postprocess(self, outputs: np.ndarray, inputs: ModelInputs) -> list[Any]:
        task = self.info.task
        if task == "embedding":
            return list(mean_pool_normalise(outputs, inputs["attention_mask"]))
        if task == "classification":
            return list(softmax(outputs))
        if task in ("reranking", "regression"):
            return [float(row[0]) for row in outputs.reshape(len(outputs), -1)]
        return list(outputs)

    def predict(self, raw: Sequence[Any]) -> list[Any]:
        inputs = self.preprocess(raw)
        return self.postprocess(self.forward(inputs), inputs)

    def sample_inputs(self, n: int) -> list[Any]:
        base = [
            "How do I reset my password?",
            "The quarterly report shows revenue grew eight percent while costs stayed flat.",
            "Fast inference matters when users wait for every answer.",
        ]
        return [base[i % len(base)] for i in range(n)]

    def with_runner(self, runner: Runner, **changes: Any) -> TextAdapter:
        # explicit changes win over the runner's own fields (e.g. precision="int8-dynamic")
        fields = {"runtime": runner.runtime, "precision": runner.precision,
                  "input_names": list(runner.input_names), **changes}
        info = dataclasses.replace(self.info, **fields)
        return dataclasses.replace(self, info=info, runner=runner)

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        """Tokens per text before truncation (for trimming and padding-waste analysis)."""
        return [len(ids) for ids in self.tokenizer(list(texts), truncation=False)["input_ids"]]


def mean_pool_normalise(token_states: np.ndarray, mask: np.ndarray) -> np.ndarray:
    weights = mask[..., None].astype(np.float32)
    pooled = (token_states.astype(np.float32) * weights).sum(axis=1)
    pooled /= np.clip(weights.sum(axis=1), 1e-9, None)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return pooled / np.clip(norms, 1e-12, None)


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)
