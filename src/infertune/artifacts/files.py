"""The run files that had no type of their own: serving.json and extras.json.

Their keys are the ones optimize has always written, so a folder written before these classes
(no ``schema`` key) still loads, as version 1. The values optimize types (a SweepResult, a
Contention, a Validation, a RightSizing, a Candidate, a CascadeResult) stay plain JSON objects
here: this package sits below optimize/ (see the package docstring), so optimize decodes them
with its own ``from_dict``; a reader below optimize (serve/) reads the one figure it needs
through a property.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from infertune.artifacts.base import Artifact
from infertune.measure.curve import ServiceCurve


@dataclass
class ServingFile(Artifact):
    """serving.json: the chosen variant's serving sweep, its finalists, the service curve it
    was simulated from, the in-process load tests (validations) and the right-sizing."""

    SCHEMA: ClassVar[str] = "infertune.serving"
    VERSION: ClassVar[int] = 1
    UNNAMED: ClassVar[int | None] = 1

    variant_id: str | None = None
    sweep: dict[str, Any] | None = None  # optimize SweepResult
    finalists: list[dict[str, Any]] = field(default_factory=list)  # SweepResult each
    curve: ServiceCurve | None = None
    contention: dict[str, Any] | None = None  # optimize Contention
    overhead_ms: float | None = None
    validations: dict[str, dict[str, Any]] = field(default_factory=dict)  # Validation each
    right_sizing: dict[str, Any] | None = None  # optimize RightSizing

    @property
    def simulated_goodput(self) -> float | None:
        """The sweep's simulated goodput per instance of the chosen policy (an estimate), or
        None when the run did not size it."""
        value = (self.right_sizing or {}).get("goodput_per_instance")
        return float(value) if isinstance(value, int | float) and value else None


@dataclass
class ExtrasFile(Artifact):
    """extras.json: the --candidate models (their timings and quality) and their cascades."""

    SCHEMA: ClassVar[str] = "infertune.extras"
    VERSION: ClassVar[int] = 1
    UNNAMED: ClassVar[int | None] = 1

    candidates: list[dict[str, Any]] = field(default_factory=list)  # optimize Candidate each
    cascades: list[dict[str, Any]] = field(default_factory=list)  # optimize CascadeResult each
