"""Test seams for serving: a fake text classifier whose forward pass can be held by an Event.

``GatedAdapter`` follows the Adapter contract with no model behind it: preprocess turns each
text into a row of its length, forward returns a deterministic probability vector per row
(a function of the text), and ``gate`` (a threading.Event) holds every forward call until it is
set, so a test decides exactly when the model finishes — no sleeps. ``seen`` records each
batch's texts in the order the model received them; ``entered`` is set when a forward starts.
Texts starting with ``FAIL`` make the whole batch raise (to test batch-failure isolation).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infertune.data.text_inputs import as_text_input
from infertune.errors import IncompatibleInputError
from infertune.models.adapter import ModelInfo, ModelInputs


class FakeRunner:
    runtime = "torch"
    precision = "fp32"
    input_names = ["lengths", "codes"]

    def __call__(self, feeds: ModelInputs) -> np.ndarray:
        codes = feeds["codes"].astype(np.float64)
        logits = np.stack([codes % 7, (codes * 3) % 5, np.full_like(codes, 2.0)], axis=1)
        exp = np.exp(logits - logits.max(axis=1, keepdims=True))
        return exp / exp.sum(axis=1, keepdims=True)


@dataclass
class GatedAdapter:
    info: ModelInfo = field(default_factory=lambda: ModelInfo(
        id="fake", version="v1", kind="text", task="classification", runtime="torch",
        input_names=["lengths", "codes"], max_length=64))
    runner: Any = field(default_factory=FakeRunner)
    gate: threading.Event = field(default_factory=threading.Event)
    entered: threading.Event = field(default_factory=threading.Event)
    seen: list[list[str]] = field(default_factory=list)
    fail_marker: str = "FAIL"

    def __post_init__(self) -> None:
        self.gate.set()  # open unless a test closes it
        self._texts: dict[int, list[str]] = {}

    def preprocess(self, raw: Sequence[Any]) -> ModelInputs:
        if isinstance(raw, str) or not raw:
            raise IncompatibleInputError("fake takes a non-empty list of texts")
        # a classification text model takes pairs too (NLI-style), as the served schema says;
        # the fake reads a pair as its two texts joined by a space
        read = [as_text_input(t, f"inputs[{i}]") for i, t in enumerate(raw)]
        raw = [t if isinstance(t, str) else f"{t.query} {t.passage}" for t in read]
        codes = np.array([sum(map(ord, t)) for t in raw], dtype=np.int64)
        lengths = np.array([len(t) for t in raw], dtype=np.int64)
        self._texts[id(codes)] = list(raw)
        return {"lengths": lengths, "codes": codes}

    def forward(self, inputs: ModelInputs) -> np.ndarray:
        texts = self._texts.pop(id(inputs["codes"]), [])
        self.seen.append(texts)
        self.entered.set()
        self.gate.wait(timeout=30)
        if any(t.startswith(self.fail_marker) for t in texts):
            raise RuntimeError("fake model failure")
        return self.runner(inputs)

    def postprocess(self, outputs: np.ndarray, inputs: ModelInputs) -> list[Any]:
        return [row.astype(np.float32) for row in outputs]

    def predict(self, raw: Sequence[Any]) -> list[Any]:
        inputs = self.preprocess(raw)
        return self.postprocess(self.forward(inputs), inputs)

    def sample_inputs(self, n: int) -> list[Any]:
        return [f"warm-up text {i}" for i in range(n)]

    def with_runner(self, runner: Any, **changes: Any) -> GatedAdapter:
        raise NotImplementedError("the fake has one runner")

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]

    def texts_seen(self) -> list[str]:
        return [t for batch in self.seen for t in batch]
