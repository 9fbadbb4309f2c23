"""The advisor's knowledge base and hardware catalogue, read from YAML data under
``report/knowledge/``. Adding an option means adding an entry to a YAML file (or a file to a
folder passed to ``load_knowledge``); no code changes.

An entry::

    - id: fp16-gpu                       # unique
      title: FP16 inference on the GPU's tensor cores
      category: precision
      applies:                           # every stated condition must hold; absent = any
        families / not_families: [transformer-encoder, ...]
        tasks / not_tasks: [...]
        frameworks: [pytorch, ...]
        targets / not_targets: [server, edge, ...]
        patterns: [steady, bursty, spiky, trace]
        any_caps: [fp16_tensor_cores]    # at least one capability (hardware.yaml caps)
        all_caps / not_caps: [...]
        runtimes / not_runtimes: [vllm]  # runtime ids of runtimes.yaml (model.runtime)
      impact: {p50: [low, high], p95: ..., p99: ..., throughput: ..., cost: ...}  # fractions
      effort: {level: low|medium|high, reason: ...}
      risk: {level: ..., reason: ...}
      verify: how to confirm it
      invalidated_by: what makes it stop paying off
      skills: [tensorrt]                 # optional: effort rises when the team lacks them
      source: what the impact range rests on (a reference, or "measured by infertune on ...")

``runtimes.yaml`` says what each serving runtime already does (entry ids it makes moot) and
``hardware.yaml`` what each named GPU and CPU can do; hardware the catalogue does not know is
assumed to be the generic hardware of its architecture, never refused (see HardwareCatalogue).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from infertune.config import HardwareFacts
from infertune.errors import ConfigError

Level = Literal["low", "medium", "high"]
HARDWARE_FILE = "hardware.yaml"
RUNTIMES_FILE = "runtimes.yaml"
CATALOGUE_FILES = frozenset({HARDWARE_FILE, RUNTIMES_FILE})
NONE_WORDS = {"", "none", "no", "cpu", "cpu only", "cpu-only", "n/a"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Applies(_Strict):
    families: list[str] | None = None
    not_families: list[str] = Field(default_factory=list)
    tasks: list[str] | None = None
    not_tasks: list[str] = Field(default_factory=list)
    frameworks: list[str] | None = None
    targets: list[str] | None = None
    not_targets: list[str] = Field(default_factory=list)
    patterns: list[str] | None = None
    any_caps: list[str] | None = None
    all_caps: list[str] = Field(default_factory=list)
    not_caps: list[str] = Field(default_factory=list)
    runtimes: list[str] | None = None
    not_runtimes: list[str] = Field(default_factory=list)


class RatedEntry(_Strict):
    level: Level
    reason: str


class KnowledgeEntry(_Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str
    category: str
    applies: Applies = Field(default_factory=Applies)
    impact: dict[Literal["p50", "p95", "p99", "throughput", "cost"], tuple[float, float]]
    effort: RatedEntry
    risk: RatedEntry
    verify: str
    invalidated_by: str
    source: str = Field(min_length=1)
    skills: list[str] = Field(default_factory=list)

    @field_validator("impact")
    @classmethod
    def _ranges(cls, value: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
        for name, (low, high) in value.items():
            if low > high:
                raise ValueError(f"impact.{name}: low {low} is above high {high}")
        return value


@dataclass(frozen=True)
class Context:
    """The facts an entry's applicability is judged against (unknown facts are None)."""

    family: str | None
    task: str | None
    framework: str | None
    target: str | None
    pattern: str | None
    caps: frozenset[str]
    skills: frozenset[str] | None = None
    runtimes: frozenset[str] = frozenset()  # ids from runtimes.yaml that model.runtime names


def applies(entry: KnowledgeEntry, ctx: Context) -> bool:
    """Whether every stated condition of ``entry`` holds for ``ctx``. An unknown fact passes a
    positive condition only when the entry does not require it (absent = any)."""
    a = entry.applies
    checks = [
        _allowed(ctx.family, a.families, a.not_families),
        _allowed(ctx.task, a.tasks, a.not_tasks),
        _allowed(ctx.framework, a.frameworks, []),
        _allowed(ctx.target, a.targets, a.not_targets),
        _allowed(ctx.pattern, a.patterns, []),
        a.any_caps is None or bool(ctx.caps & set(a.any_caps)),
        set(a.all_caps) <= ctx.caps,
        not (ctx.caps & set(a.not_caps)),
        a.runtimes is None or bool(ctx.runtimes & set(a.runtimes)),
        not (ctx.runtimes & set(a.not_runtimes)),
    ]
    return all(checks)


def _allowed(fact: str | None, allowed: list[str] | None, denied: list[str]) -> bool:
    if fact in denied:
        return False
    return allowed is None or fact in allowed


@dataclass
class KnowledgeBase:
    entries: list[KnowledgeEntry]
    sources: list[str] = field(default_factory=list)

    def applicable(self, ctx: Context) -> list[KnowledgeEntry]:
        return [e for e in self.entries if applies(e, ctx)]


def default_dir() -> Path:
    return Path(str(resources.files("infertune.report") / "knowledge"))


def load_knowledge(dirs: list[Path] | None = None) -> KnowledgeBase:
    """Read every ``*.yaml`` (except the hardware and runtime catalogues) in ``dirs`` (default:
    the bundled folder)."""
    entries: list[KnowledgeEntry] = []
    files: list[str] = []
    for folder in dirs or [default_dir()]:
        for path in sorted(Path(folder).glob("*.yaml")):
            if path.name in CATALOGUE_FILES:
                continue
            entries.extend(_read_entries(path))
            files.append(str(path))
    seen: set[str] = set()
    for entry in entries:
        if entry.id in seen:
            raise ConfigError(f"knowledge entry id {entry.id!r} appears twice; ids must be unique")
        seen.add(entry.id)
    return KnowledgeBase(entries=entries, sources=files)


def _read_entries(path: Path) -> list[KnowledgeEntry]:
    data = _read_yaml(path)
    raw = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(raw, list):
        raise ConfigError(f"{path}: expected a top-level 'entries:' list of knowledge entries")
    out = []
    for i, item in enumerate(raw):
        try:
            out.append(KnowledgeEntry.model_validate(item))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ConfigError(f"{path}: entry {i + 1}: {where}: {err['msg']}; "
                              "see the field list in infertune/report/knowledge.py") from exc
    return out


def _read_yaml(path: Path) -> object:
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML; check the indentation") from exc


# ---- hardware catalogue ---------------------------------------------------------------------


@dataclass(frozen=True)
class HardwareProfile:
    """What the advisor knows about the stated hardware, and what it had to assume."""

    description: str
    caps: frozenset[str]
    gpu: str | None = None
    cpu: str | None = None
    notes: tuple[str, ...] = ()
    assumptions: tuple[str, ...] = ()  # each says what was assumed and how to correct it
    gpu_memory_gb: float | None = None


@dataclass
class HardwareCatalogue:
    gpus: dict[str, dict[str, Any]]
    cpus: list[dict[str, Any]]
    cpu_flags: dict[str, list[str]]
    generic: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | None = None) -> HardwareCatalogue:
        data = _read_yaml(path or default_dir() / HARDWARE_FILE)
        if not isinstance(data, dict) or not {"gpus", "cpus", "generic"} <= set(data):
            raise ConfigError(f"{path}: expected 'gpus', 'cpus', 'generic' and 'cpu_flags' "
                              "mappings")
        return cls(gpus=data["gpus"], cpus=data["cpus"], cpu_flags=data.get("cpu_flags", {}),
                   generic=data["generic"])

    def resolve(self, facts: HardwareFacts) -> HardwareProfile:
        """Capabilities of the stated hardware. Names the catalogue does not know are assumed
        to be the generic hardware of their architecture; each assumption is returned with how
        to correct it. Nothing here refuses a scenario."""
        caps: set[str] = set()
        notes: list[str] = []
        assumed: list[str] = []
        gpu_name, memory = self._gpu(facts, caps, notes, assumed)
        known_cpus = len(assumed)
        cpu_name = self._cpu(facts.cpu, caps, assumed) if facts.cpu else None
        cpu_text = (f"{facts.cpu} (assumed a {cpu_name})" if len(assumed) > known_cpus
                    else facts.cpu)
        parts = [f"one {gpu_name}" if gpu_name else None, cpu_text]
        return HardwareProfile(description=" with ".join(p for p in parts if p) or "unstated",
                               caps=frozenset(caps), gpu=gpu_name, cpu=cpu_name,
                               notes=tuple(notes), assumptions=tuple(assumed),
                               gpu_memory_gb=memory)

    def _gpu(self, facts: HardwareFacts, caps: set[str], notes: list[str],
             assumed: list[str]) -> tuple[str | None, float | None]:
        accel = (facts.accelerator or "").strip()
        stated = (facts.gpu or "").strip()
        memory = _memory_gb(stated)
        if accel.lower() == "other":
            caps.add("gpu")
            notes.append(f"accelerator 'other' ({stated or 'unnamed'}): its capabilities are "
                         "unknown, so precision options that need a named GPU are left out")
            return (f"other accelerator ({stated})" if stated else "other accelerator"), memory
        names = [n for n in (stated, accel) if n.lower() not in NONE_WORDS]
        if not names:
            return None, None
        known = next((k for k in map(self._match_gpu, names) if k is not None), None)
        if known is not None:
            entry = self.gpus[known]
            caps.update(entry["caps"])
            if entry.get("note"):
                notes.append(f"{known}: {entry['note']}")
            return known, memory or entry.get("memory_gb")
        generic = self.generic["gpu"]
        caps.update(generic["caps"])
        size = f"{memory:g} GB, as stated" if memory else "memory not stated"
        write_memory = "" if memory else f"write its memory in the name (e.g. '{names[0]} 48GB'), "
        assumed.append(
            f"GPU {names[0]!r} is not in the catalogue: assumed a {generic['name']} with FP16 "
            f"tensor cores and no BF16, INT8 or FP8 ({size}); to correct it, name a known GPU "
            f"({', '.join(self.gpus)}), {write_memory}or set deployment.hardware.accelerator: "
            "other to assume nothing")
        return f"{names[0]} (assumed a {generic['name']}{f', {memory:g} GB' if memory else ''})", \
            memory

    def _match_gpu(self, text: str) -> str | None:
        lowered = text.lower()
        # longest names first, so "A100" is not read as "A10"
        for name in sorted(self.gpus, key=len, reverse=True):
            if re.search(rf"(?<![a-z0-9]){re.escape(name.lower())}(?![a-z0-9])", lowered):
                return name
        return None

    def _cpu(self, text: str, caps: set[str], assumed: list[str]) -> str:
        lowered = text.lower()
        for word, flag_caps in self.cpu_flags.items():
            if word in lowered:
                caps.update(flag_caps)
        for entry in self.cpus:
            # left word boundary only: "graviton" matches "Graviton3", "arm" matches "armv8"
            if all(re.search(rf"(?<![a-z0-9]){re.escape(w)}", lowered)
                   for w in entry["match"]):
                caps.update(entry["caps"])
                return str(entry["name"])
        arm = self.generic["arm64"]
        is_arm = any(re.search(rf"(?<![a-z0-9]){re.escape(w)}", lowered) for w in arm["match"])
        generic = arm if is_arm else self.generic["x86-64"]
        caps.update(generic["caps"])
        what = ("given by its size only" if re.fullmatch(r"[\d\s.,]*(v?cpus?|cores?|vcores?|"
                                                          r"threads?)?", lowered.strip())
                else "of a family the catalogue does not know")
        baseline = ("no SVE" if is_arm else
                    "no AVX-512, VNNI, BF16 or AMX unless written in the text")
        assumed.append(
            f"CPU {text!r} is {what}: assumed a {generic['name']} ({baseline}); to correct it, "
            "name the family in deployment.hardware.cpu (e.g. 'Intel Xeon Ice Lake', 'AMD EPYC "
            "Genoa', 'AWS Graviton3') or write its flags (avx512_vnni, avx512_bf16, amx)")
        return str(generic["name"])


def _memory_gb(text: str) -> float | None:
    """'RTX 6000 Ada 48GB' -> 48.0; None when no size is written."""
    # the number must stand alone: "A10G" is a GPU name, not 10 GB
    match = re.search(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)\s*(?:gb|gib|g)(?![a-z0-9])", text.lower())
    return float(match.group(1)) if match else None
