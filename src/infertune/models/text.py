"""TextAdapter: a tokenizer in front of a Runner, with task-specific postprocessing.

Embedding postprocessing is sentence-transformers' mean pooling over real (unmasked) tokens
followed by L2 normalisation, so the output matches what all-MiniLM-L6-v2 users get. A reranker
(cross-encoder) takes (query, passage) pairs (data/text_inputs.py), encoded as the tokenizer
encodes ``tokenizer(query, passage)``: token_type_ids 0 for the query and 1 for the passage,
the passage truncated first; its output is the raw relevance logit, never a softmax (a softmax
over one logit is 1.0 for every input).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from infertune.data.text_inputs import TextInput, TextPair, text_inputs
from infertune.errors import IncompatibleInputError
from infertune.models.adapter import ModelInfo, ModelInputs, Runner

Padding = Literal["longest", "max_length", "bucket"]
# How a pair too long for max_length is cut: the passage first (a query is short and every
# word of it matters), as sentence-transformers' CrossEncoder does.
Truncation = Literal["only_second", "longest_first", "only_first"]


@dataclass(frozen=True)
class TextPreprocess:
    """How raw text becomes token arrays. ``bucket`` pads each batch up to the next bucket
    length, so a compiled or cached graph sees few distinct shapes."""

    max_length: int = 256
    padding: Padding = "longest"
    buckets: tuple[int, ...] = (16, 32, 64, 128, 256, 512)
    truncation: Truncation = "only_second"  # pairs only

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
                f"{self.info.id} takes a non-empty list of inputs; got {type(raw).__name__}"
            )
        items = text_inputs(raw, self.info.task, self.info.id)
        ids_list, types_list = self._encode(items, truncate=True)
        longest = max(len(ids) for ids in ids_list)
        width = self.pre.padded_length(longest)
        pad_id = self.tokenizer.pad_token_id or 0
        ids = np.full((len(ids_list), width), pad_id, dtype=np.int64)
        mask = np.zeros((len(ids_list), width), dtype=np.int64)
        types = np.zeros((len(ids_list), width), dtype=np.int64)
        for row, (seq, kinds) in enumerate(zip(ids_list, types_list, strict=True)):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
            types[row, : len(kinds)] = kinds
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.runner.input_names:
            feeds["token_type_ids"] = types
        return feeds

    def _encode(self, items: list[TextInput],
                truncate: bool) -> tuple[list[list[int]], list[list[int]]]:
        """Token ids and token type ids per input, unpadded. Strings and pairs are encoded in
        separate tokenizer calls (one call takes one kind) and put back in order."""
        ids: list[list[int]] = [[] for _ in items]
        types: list[list[int]] = [[] for _ in items]
        singles = [i for i, x in enumerate(items) if not isinstance(x, TextPair)]
        pairs = [i for i, x in enumerate(items) if isinstance(x, TextPair)]
        if singles:
            enc = self.tokenizer([items[i] for i in singles], truncation=truncate,
                                 max_length=self.pre.max_length if truncate else None,
                                 padding=False, return_attention_mask=False)
            for i, seq in zip(singles, enc["input_ids"], strict=True):
                ids[i], types[i] = list(seq), [0] * len(seq)
        if pairs:
            for i, (seq, kinds) in zip(pairs, self._encode_pairs(
                    [p for p in items if isinstance(p, TextPair)], truncate), strict=True):
                ids[i], types[i] = seq, kinds
        return ids, types

    def _encode_pairs(self, pairs: list[TextPair],
                      truncate: bool) -> list[tuple[list[int], list[int]]]:
        strategy: str | bool = self.pre.truncation if truncate else False
        try:
            return self._pair_call(pairs, strategy)
        except Exception:  # noqa: BLE001 - tokenizers raises a bare Exception for this
            # only_second cannot cut a pair whose query alone is over max_length: such a pair
            # is cut from the longer side instead, each pair on its own so the rest keep the
            # configured strategy
            out = []
            for pair in pairs:
                try:
                    out.extend(self._pair_call([pair], strategy))
                except Exception:  # noqa: BLE001 - same tokenizers error as above
                    out.extend(self._pair_call([pair], "longest_first"))
            return out

    def _pair_call(self, pairs: list[TextPair],
                   strategy: str | bool) -> list[tuple[list[int], list[int]]]:
        enc = self.tokenizer([p.query for p in pairs], [p.passage for p in pairs],
                             truncation=strategy,
                             max_length=self.pre.max_length if strategy else None,
                             padding=False, return_attention_mask=False,
                             return_token_type_ids=True)
        return [(list(seq), list(kinds) if kinds is not None else [0] * len(seq))
                for seq, kinds in zip(enc["input_ids"], enc["token_type_ids"], strict=True)]

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
        if self.info.task == "reranking":
            pairs = [
                TextPair("how do I reset my password",
                         "Open Settings, choose Security and press Reset password."),
                TextPair("quarterly revenue growth",
                         "The quarterly report shows revenue grew eight percent."),
                TextPair("why does latency matter",
                         "Fast inference matters when users wait for every answer."),
            ]
            return [pairs[i % len(pairs)] for i in range(n)]
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

    def token_lengths(self, texts: Sequence[Any]) -> list[int]:
        """Tokens per input before truncation (a pair counts both sides and its separators),
        for trimming and padding-waste analysis."""
        items = text_inputs(texts, self.info.task, self.info.id)
        ids, _ = self._encode(items, truncate=False)
        return [len(seq) for seq in ids]


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
