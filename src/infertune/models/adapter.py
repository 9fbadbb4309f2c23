"""The Adapter contract every model is wrapped in, and the Runner it drives.

Call order for one batch of raw requests (a list, one item per request):

    inputs  = adapter.preprocess(raw)       # tokenise / stack / pad -> dict of numpy arrays
    outputs = adapter.forward(inputs)       # the model itself -> one numpy array, batch first
    results = adapter.postprocess(outputs, inputs)   # pooling, normalise, softmax -> list

``predict(raw)`` runs the three in order. The stages are separate so that measure/ can time each
one, and so that optimize/ can swap the Runner (torch eager, ONNX Runtime, INT8...) while the
preprocessing and postprocessing stay exactly those of the baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from infertune.serial import Serial

ModelInputs = dict[str, np.ndarray]
Runtime = Literal["torch", "onnxruntime", "openvino"]
Kind = Literal["text", "tensor"]


@dataclass
class ModelInfo(Serial):
    """What a model is, independent of how it is run."""

    id: str  # a short name: "minilm", a file stem, or a variant id
    version: str  # a content hash of the model files (first 12 hex digits of SHA-256)
    kind: Kind
    task: str  # embedding | classification | reranking | regression | other
    runtime: Runtime
    precision: str = "fp32"
    input_names: list[str] = field(default_factory=list)
    source: str = ""  # the path or reference it was loaded from
    max_length: int | None = None  # text models: the tokenizer's truncation length
    max_position: int | None = None  # text models: the model's position limit
    tokenizer_dir: str | None = None


@runtime_checkable
class Runner(Protocol):
    """Runs the model's forward pass on numpy feeds; returns one batch-first numpy array."""

    runtime: Runtime
    precision: str
    input_names: list[str]

    def __call__(self, feeds: ModelInputs) -> np.ndarray: ...


@runtime_checkable
class Adapter(Protocol):
    info: ModelInfo
    runner: Runner

    def preprocess(self, raw: Sequence[Any]) -> ModelInputs: ...

    def forward(self, inputs: ModelInputs) -> np.ndarray: ...

    def postprocess(self, outputs: np.ndarray, inputs: ModelInputs) -> list[Any]: ...

    def predict(self, raw: Sequence[Any]) -> list[Any]: ...

    def sample_inputs(self, n: int) -> list[Any]:
        """n representative raw inputs, for warm-up when the user gave no data."""
        ...

    def with_runner(self, runner: Runner, **changes: Any) -> Adapter:
        """A copy that runs ``runner`` with the same pre/postprocessing (info updated)."""
        ...
