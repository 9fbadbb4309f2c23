"""The Pass contract and the context every pass reads.

Call order (build_variants in passes/__init__.py drives it)::

    reason = pass_.applies(ctx)           # None: applies; else why not (recorded as "skipped")
    variant = pass_.apply(source, ctx)    # source: the Variant named by pass_.source, or None
                                          # for passes that start from the baseline model
    check_variant(variant, ctx)           # loads the folder, runs it, records agreement

A pass writes exactly one folder, ``ctx.out_dir / pass_.name``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from infertune.data.text_inputs import is_text_input, text_length
from infertune.errors import ConfigError
from infertune.hardware import HardwareInfo
from infertune.models.adapter import Adapter
from infertune.models.variant import Agreement
from infertune.optimize.passes.variant_files import Variant, predict_rows
from infertune.serial import Serial


@dataclass(frozen=True)
class QualityTarget:
    """The floor a variant's agreement with the baseline must meet (mixed precision uses it)."""

    min_mean_cosine: float = 0.99
    min_min_cosine: float | None = None

    def __post_init__(self) -> None:
        for value in (self.min_mean_cosine, self.min_min_cosine):
            if value is not None and not -1.0 <= value <= 1.0:
                raise ConfigError(f"a cosine floor must lie in [-1, 1]; got {value}")

    def holds(self, found: Agreement, margin: float = 0.0) -> bool:
        """Whether ``found`` meets the floor raised by ``margin`` (a guard for searches that
        score on the same inputs they select on)."""
        if found.mean_cosine < min(self.min_mean_cosine + margin, 1.0):
            return False
        return (self.min_min_cosine is None
                or found.min_cosine >= min(self.min_min_cosine + margin, 1.0))

    def describe(self) -> str:
        text = f"mean cosine >= {self.min_mean_cosine}"
        if self.min_min_cosine is not None:
            text += f" and min cosine >= {self.min_min_cosine}"
        return text


@dataclass
class PassContext:
    """Everything a pass may read. ``calibration`` holds raw held-out inputs (the user's)."""

    baseline: Adapter
    hardware: HardwareInfo
    out_dir: Path
    calibration: Sequence[Any] = ()
    samples: Sequence[Any] = ()  # agreement-check inputs; default: the first n_samples above
    quality: QualityTarget = field(default_factory=QualityTarget)
    max_calibration: int = 128  # inputs used to calibrate / score quantization
    n_samples: int = 32  # inputs used for the build-time agreement check
    compile_budget_s: float = 300.0  # a torch.compile variant over this is skipped
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        if self.max_calibration < 1 or self.n_samples < 1:
            raise ConfigError("max_calibration and n_samples must be >= 1")

    def calibration_inputs(self) -> list[Any]:
        inputs = list(self.calibration)[: self.max_calibration]
        return _by_length(inputs or self.baseline.sample_inputs(min(self.max_calibration, 16)))

    def sample_inputs(self) -> list[Any]:
        inputs = list(self.samples or self.calibration)[: self.n_samples]
        return _by_length(inputs or self.baseline.sample_inputs(self.n_samples))

    def reference(self, which: Literal["samples", "calibration"]) -> np.ndarray:
        """Baseline final outputs on sample_inputs() or calibration_inputs(), computed once."""
        key = f"reference:{which}"
        if key not in self._cache:
            inputs = self.sample_inputs() if which == "samples" else self.calibration_inputs()
            self._cache[key] = predict_rows(self.baseline, inputs)
        return self._cache[key]

    def cached(self, key: str, make: Callable[[], Any]) -> Any:
        """A value shared by passes in one run (the source model's hash...), made once."""
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]


def _by_length(inputs: list[Any]) -> list[Any]:
    """Texts sorted by length (stable), so scoring batches pad little: on minilm's held-out
    paragraphs, unsorted batches of 16 spent most of their time on padding."""
    if inputs and all(is_text_input(x) for x in inputs):
        return sorted(inputs, key=text_length)
    return inputs


@dataclass(frozen=True)
class PassSettings(Serial):
    """What a pass was asked to do, as its record in the manifest holds it (``PassRecord``
    keeps the JSON dict; ``registry.settings_of`` reads a record back as its pass's class).
    Each pass family declares its subclass beside it; fields a pass only learns at build time
    are ``None`` until then and left out of the JSON (``omit_none``)."""


def built() -> Any:
    """A field the pass fills in at build time: None, and not written, until then."""
    return field(default=None, metadata={"omit_none": True})


class Pass(Protocol):
    # read-only in the protocol, so a pass may declare them as plain class attributes
    @property
    def name(self) -> str: ...

    @property
    def source(self) -> str | None:
        """The pass whose Variant this one builds on; None: the baseline."""

    @property
    def fallback_source(self) -> str | None:
        """Built on instead when ``source`` was not built (e.g. no transformer fusion for this
        graph, or an .onnx baseline): the variant then records the passes it really went
        through."""

    def applies(self, ctx: PassContext) -> str | None: ...

    def apply(self, source: Variant | None, ctx: PassContext) -> Variant: ...

    def settings(self) -> PassSettings: ...
