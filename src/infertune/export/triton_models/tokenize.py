"""Triton Python-backend model: text in, token arrays out, exactly as infertune's TextAdapter
preprocesses (models/text.py): the variant's own tokenizer, truncation at max_length, padding
to the request's longest text (or to max_length, or to the next bucket, as the variant says)
with the tokenizer's pad id, an attention mask, and zero token_type_ids when the model takes
them. The settings come from ``preprocessing.json`` beside this file, written by
`infertune export` from the variant's manifest.json.

Input ``TEXT``: TYPE_STRING, shape [batch, 1], UTF-8. Outputs: ``input_ids``,
``attention_mask`` (and ``token_type_ids``), TYPE_INT64, shape [batch, length].
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import transformers
import triton_python_backend_utils as pb_utils


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
        raw = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
        texts = []
        for i, item in enumerate(raw):
            try:
                texts.append(item.decode("utf-8") if isinstance(item, bytes) else str(item))
            except UnicodeDecodeError:
                return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(
                    f"TEXT[{i}] is not UTF-8 text; send UTF-8 encoded strings"))
        if not texts:
            return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(
                "TEXT is empty; send at least one string"))
        arrays = self.encode(texts)
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor(name, value) for name, value in arrays.items()])

    def encode(self, texts: list[str]) -> dict[str, np.ndarray]:
        s = self.settings
        encoded = self.tokenizer(texts, truncation=True, max_length=int(s["max_length"]),
                                 padding=False, return_attention_mask=False)["input_ids"]
        width = padded_length(max(len(ids) for ids in encoded), s)
        pad_id = self.tokenizer.pad_token_id or 0
        ids = np.full((len(encoded), width), pad_id, dtype=np.int64)
        mask = np.zeros((len(encoded), width), dtype=np.int64)
        for row, seq in enumerate(encoded):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        out = {"input_ids": ids, "attention_mask": mask}
        if s["token_type_ids"]:
            out["token_type_ids"] = np.zeros_like(ids)
        return out
