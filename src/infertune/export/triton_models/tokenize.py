"""Triton Python-backend model: text in, token arrays out, exactly as infertune's TextAdapter
preprocesses (models/text.py): the variant's own tokenizer, truncation at max_length, padding
to the request's longest text (or to max_length, or to the next bucket, as the variant says)
with the tokenizer's pad id, an attention mask, and token_type_ids when the model takes them.
A cross-encoder (``"pairs": true``) reads a query and a passage together, encoded as
``tokenizer(query, passage)``: token_type_ids 0 for the query and 1 for the passage, the
passage truncated first (``truncation``), a pair whose query alone is too long cut from its
longer side. The settings come from ``preprocessing.json`` beside this file, written by
`infertune export` from the variant's manifest.json.

Input ``TEXT`` (and for pairs ``TEXT_PAIR``, the passages): TYPE_STRING, shape [batch, 1],
UTF-8. Outputs: ``input_ids``, ``attention_mask`` (and ``token_type_ids``), TYPE_INT64, shape
[batch, length].
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import transformers
import triton_python_backend_utils as pb_utils


# ``settings`` stays a plain dict read by key on purpose: this file is copied into the Triton
# model repository and runs inside Triton's Python backend, where infertune is not installed,
# so it cannot import Preprocessing (models/variant.py) or any other infertune type; it imports
# only the standard library, numpy, transformers and Triton's own pb_utils.
def padded_length(longest: int, settings: dict[str, Any]) -> int:
    """The same rule as TextPreprocess.padded_length."""
    max_length = int(settings["max_length"])
    if settings["padding"] == "max_length":
        return max_length
    if settings["padding"] == "bucket":
        fitting = [b for b in settings["buckets"] if b >= longest]
        return min(min(fitting) if fitting else max_length, max_length)
    return longest


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        here = Path(args["model_repository"]) / args["model_version"]
        self.settings = json.loads((here / "preprocessing.json").read_text())
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(
            str(here / self.settings["tokenizer_dir"]), local_files_only=True)

    def execute(self, requests: list[Any]) -> list[Any]:
        return [self._one(request) for request in requests]

    def _one(self, request: Any) -> Any:
        texts, error = _strings(request, "TEXT")
        passages: list[str] | None = None
        if error is None and self.settings.get("pairs"):
            passages, error = _strings(request, "TEXT_PAIR")
            if error is None and passages is not None and len(passages) != len(texts):
                error = (f"TEXT has {len(texts)} queries but TEXT_PAIR {len(passages)} "
                         "passages; send one passage per query")
        if error is None and not texts:
            error = "TEXT is empty; send at least one string"
        if error is not None:
            return pb_utils.InferenceResponse(output_tensors=[],
                                              error=pb_utils.TritonError(error))
        arrays = self.encode(texts, passages)
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor(name, value) for name, value in arrays.items()])

    def encode(self, texts: list[str],
               passages: list[str] | None = None) -> dict[str, np.ndarray]:
        s = self.settings
        if passages is None:
            encoded = self.tokenizer(texts, truncation=True, max_length=int(s["max_length"]),
                                     padding=False, return_attention_mask=False)["input_ids"]
            kinds = [[0] * len(seq) for seq in encoded]
        else:
            encoded, kinds = self._pairs(texts, passages)
        width = padded_length(max(len(ids) for ids in encoded), s)
        pad_id = self.tokenizer.pad_token_id or 0
        ids = np.full((len(encoded), width), pad_id, dtype=np.int64)
        mask = np.zeros((len(encoded), width), dtype=np.int64)
        types = np.zeros((len(encoded), width), dtype=np.int64)
        for row, (seq, kind) in enumerate(zip(encoded, kinds, strict=True)):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
            types[row, : len(kind)] = kind
        out = {"input_ids": ids, "attention_mask": mask}
        if s["token_type_ids"]:
            out["token_type_ids"] = types
        return out

    def _pairs(self, queries: list[str],
               passages: list[str]) -> tuple[list[list[int]], list[list[int]]]:
        strategy = self.settings.get("truncation", "only_second")
        ids: list[list[int]] = []
        kinds: list[list[int]] = []
        for query, passage in zip(queries, passages, strict=True):
            try:
                enc = self._pair(query, passage, strategy)
            except Exception:  # tokenizers' bare Exception: only_second cannot cut enough
                enc = self._pair(query, passage, "longest_first")
            ids.append(list(enc["input_ids"]))
            kinds.append(list(enc["token_type_ids"]))
        return ids, kinds

    def _pair(self, query: str, passage: str, strategy: str) -> Any:
        return self.tokenizer(query, passage, truncation=strategy,
                              max_length=int(self.settings["max_length"]), padding=False,
                              return_attention_mask=False, return_token_type_ids=True)


def _strings(request: Any, name: str) -> tuple[list[str], str | None]:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return [], f"{name} is missing; this model takes TEXT (queries) and TEXT_PAIR (passages)"
    out = []
    for i, item in enumerate(tensor.as_numpy().reshape(-1)):
        try:
            out.append(item.decode("utf-8") if isinstance(item, bytes) else str(item))
        except UnicodeDecodeError:
            return [], f"{name}[{i}] is not UTF-8 text; send UTF-8 encoded strings"
    return out, None
