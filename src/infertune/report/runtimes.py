"""The runtime catalogue (``report/knowledge/runtimes.yaml``): what each serving runtime already
does, so ``advise`` leaves those options out and says why, and recommends the runtime's own
knobs instead (knowledge entries with ``applies.runtimes``).

A scenario's ``model.runtime`` is free text ("vLLM 0.8 on 2 x L4", "pytorch eager fp32"); every
runtime whose match words appear in it as whole words applies, minus those another matched
runtime shadows (TensorRT-LLM shadows TensorRT). Text naming no known runtime matches none:
then nothing is assumed about it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infertune.errors import ConfigError
from infertune.report.knowledge import RUNTIMES_FILE, KnowledgeBase, default_dir


class RuntimeEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    name: str
    match: list[str] = Field(min_length=1)
    source: str = Field(min_length=1)
    does: dict[str, str] = Field(default_factory=dict)  # knowledge-entry id -> how
    shadows: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class AlreadyDone:
    """A knowledge entry left out because the runtime already does it."""

    entry_id: str
    runtime: str  # the runtime's display name
    how: str
    source: str


@dataclass
class RuntimeCatalogue:
    runtimes: list[RuntimeEntry]

    @classmethod
    def load(cls, path: Path | None = None) -> RuntimeCatalogue:
        path = path or default_dir() / RUNTIMES_FILE
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{path}: cannot read the runtime catalogue ({exc})") from exc
        raw = data.get("runtimes") if isinstance(data, dict) else None
        if not isinstance(raw, list):
            raise ConfigError(f"{path}: expected a top-level 'runtimes:' list")
        out = []
        for i, item in enumerate(raw):
            try:
                out.append(RuntimeEntry.model_validate(item))
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(p) for p in err["loc"])
                raise ConfigError(f"{path}: runtime {i + 1}: {where}: {err['msg']}; see "
                                  "infertune/report/runtimes.py") from exc
        return cls(out)

    def check(self, knowledge: KnowledgeBase) -> None:
        """Every id a runtime 'does' must be a knowledge entry (a typo would silently keep an
        option the runtime already has)."""
        ids = {e.id for e in knowledge.entries}
        for runtime in self.runtimes:
            unknown = sorted(set(runtime.does) - ids)
            if unknown:
                raise ConfigError(f"runtime {runtime.id!r} says it does {', '.join(unknown)}, "
                                  "which no knowledge entry is; fix the id in runtimes.yaml")

    def match(self, text: str | None) -> list[RuntimeEntry]:
        """The runtimes ``text`` names, in catalogue order."""
        if not text:
            return []
        lowered = text.lower()
        found = [r for r in self.runtimes
                 if any(re.search(rf"(?<![a-z0-9]){re.escape(w.lower())}(?![a-z0-9])", lowered)
                        for w in r.match)]
        shadowed = {s for r in found for s in r.shadows}
        return [r for r in found if r.id not in shadowed]

    def already_done(self, matched: list[RuntimeEntry]) -> dict[str, AlreadyDone]:
        """Entry id -> why it is moot, for the matched runtimes (the first one to claim wins)."""
        out: dict[str, AlreadyDone] = {}
        for runtime in matched:
            for entry_id, how in runtime.does.items():
                out.setdefault(entry_id, AlreadyDone(entry_id, runtime.name, how,
                                                     runtime.source))
        return out
