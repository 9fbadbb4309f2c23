"""TensorAdapter: for models whose inputs are already tensors (.onnx, TorchScript, entry
points). A raw input is one example: an array (single-input models) or a dict of arrays by
input name. Preprocess stacks examples along a new batch axis; postprocess splits the rows."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from infertune.errors import IncompatibleInputError
from infertune.models.base import ModelInfo, ModelInputs, Runner


@dataclass
class TensorAdapter:
    info: ModelInfo
    runner: Runner
    example: dict[str, np.ndarray]  # one example per input name, without the batch axis

    def preprocess(self, raw: Sequence[Any]) -> ModelInputs:
        if isinstance(raw, (str, bytes)) or not isinstance(raw, Sequence) or len(raw) == 0:
            raise IncompatibleInputError(
                f"{self.info.id} takes a non-empty list of examples; got {type(raw).__name__}"
            )
        names = list(self.example)
        columns: dict[str, list[np.ndarray]] = {name: [] for name in names}
        for i, item in enumerate(raw):
            fields = item if isinstance(item, dict) else {names[0]: item}
            if len(names) > 1 and not isinstance(item, dict):
                raise IncompatibleInputError(
                    f"{self.info.id} has inputs {names}; example {i} must be a dict of them"
                )
            for name in names:
                if name not in fields:
                    raise IncompatibleInputError(
                        f"{self.info.id}: example {i} lacks input {name!r}; it needs {names}"
                    )
                columns[name].append(self._as_array(fields[name], name, i))
        return {name: np.stack(values) for name, values in columns.items()}

    def _as_array(self, value: Any, name: str, index: int) -> np.ndarray:
        expected = self.example[name]
        try:
            arr = np.asarray(value, dtype=expected.dtype)
        except (TypeError, ValueError) as exc:
            raise IncompatibleInputError(
                f"{self.info.id}: example {index} input {name!r} is not numeric "
                f"({expected.dtype} expected)"
            ) from exc
        if arr.ndim != expected.ndim or (
            arr.shape[1:] != expected.shape[1:] if arr.ndim > 1 else False
        ):
            raise IncompatibleInputError(
                f"{self.info.id}: example {index} input {name!r} has shape {arr.shape}; "
                f"the model takes {expected.shape} per example"
            )
        return arr

    def forward(self, inputs: ModelInputs) -> np.ndarray:
        return self.runner(inputs)

    def postprocess(self, outputs: np.ndarray, inputs: ModelInputs) -> list[Any]:
        return list(outputs)

    def predict(self, raw: Sequence[Any]) -> list[Any]:
        inputs = self.preprocess(raw)
        return self.postprocess(self.forward(inputs), inputs)

    def sample_inputs(self, n: int) -> list[Any]:
        rng = np.random.default_rng(0)
        names = list(self.example)

        def one() -> Any:
            made = {k: _like(v, rng) for k, v in self.example.items()}
            return made if len(names) > 1 else made[names[0]]

        return [one() for _ in range(n)]

    def with_runner(self, runner: Runner, **changes: Any) -> TensorAdapter:
        info = dataclasses.replace(
            self.info, runtime=runner.runtime, precision=runner.precision,
            input_names=list(runner.input_names), **changes,
        )
        return dataclasses.replace(self, info=info, runner=runner)


def _like(example: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if np.issubdtype(example.dtype, np.floating):
        return rng.standard_normal(example.shape).astype(example.dtype)
    return example.copy()
