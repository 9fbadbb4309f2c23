"""The one registry of passes: name -> (factory, facts). A pass module registers its class with
``@register(name, facts=PassFacts(...), **constructor_kwargs)`` (stacked for a class that makes
several passes); ``create_pass`` builds one by name and lists the valid names on a miss.

A ``Registry`` is a read-only mapping from name to factory, so ``REGISTRY | {name: factory}``
(tests swapping in a cheaper factory) gives a new registry that keeps the facts of the names it
overrides; a name it does not know gets the facts its class declares in ``facts`` (if any),
else ``UNKNOWN``.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from infertune.errors import ConfigError, InternalError
from infertune.hardware import HardwareInfo
from infertune.models.variant import PassRecord
from infertune.optimize.passes.base import Pass, PassSettings
from infertune.optimize.passes.facts import UNKNOWN, PassFacts
from infertune.serial import Serial

PassFactory = Callable[[], Pass]
T = TypeVar("T")


@dataclass(frozen=True)
class Entry:
    name: str
    factory: PassFactory
    facts: PassFacts


class Registry(Mapping[str, PassFactory]):
    """Pass name -> factory, with each pass's facts beside it (``facts(name)``)."""

    def __init__(self, entries: Mapping[str, Entry] | None = None) -> None:
        self._entries: dict[str, Entry] = dict(entries or {})

    def register(self, name: str, *, facts: PassFacts, **kwargs: Any
                 ) -> Callable[[type[T]], type[T]]:
        """Class decorator: ``name`` is built by ``cls(**kwargs)`` and carries ``facts``."""
        def decorate(cls: type[T]) -> type[T]:
            factory = partial(cls, **kwargs) if kwargs else cls
            self.add(name, factory, facts)  # type: ignore[arg-type]
            return cls
        return decorate

    def add(self, name: str, factory: PassFactory, facts: PassFacts) -> None:
        if name in self._entries and self._entries[name].factory != factory:
            raise InternalError(f"pass {name!r} is registered twice")
        self._entries[name] = Entry(name, factory, facts)

    def facts(self, name: str) -> PassFacts:
        entry = self._entries.get(name)
        return entry.facts if entry is not None else UNKNOWN

    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    def settings_type(self, name: str) -> type[PassSettings]:
        """The class ``name``'s ``settings()`` returns (read from its annotation, so the pass
        declares it once); PassSettings for a name this registry does not know."""
        entry = self._entries.get(name)
        cls = getattr(entry.factory, "func", entry.factory) if entry else None
        method = getattr(cls, "settings", None)
        hint = typing.get_type_hints(method).get("return") if method is not None else None
        return hint if isinstance(hint, type) and issubclass(hint, PassSettings) \
            else PassSettings

    def create(self, name: str) -> Pass:
        entry = self._entries.get(name)
        if entry is None:
            raise ConfigError(f"unknown pass {name!r}; choose from {', '.join(self._entries)}")
        made = entry.factory()
        if made.name != name:
            raise InternalError(f"registry entry {name!r} builds a pass named {made.name!r}")
        return made

    def copy(self) -> Registry:
        return Registry(self._entries)

    def __getitem__(self, name: str) -> PassFactory:
        return self._entries[name].factory

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __or__(self, other: Mapping[str, PassFactory]) -> Registry:
        merged = dict(self._entries)
        for name, factory in other.items():
            merged[name] = Entry(name, factory, _facts_for(name, factory, self))
        return Registry(merged)


def _facts_for(name: str, factory: PassFactory, known: Registry) -> PassFacts:
    if name in known:
        return known.facts(name)
    declared = getattr(getattr(factory, "func", factory), "facts", None)
    return declared if isinstance(declared, PassFacts) else UNKNOWN


# The process-wide registry the pass modules register into (imported by passes/__init__.py).
REGISTRY = Registry()
register = REGISTRY.register


def as_registry(found: Mapping[str, PassFactory] | None) -> Registry:
    """A Registry for ``found``: itself, the default (None), or a plain dict of factories whose
    facts come from the default registry where it knows the name."""
    if found is None:
        return REGISTRY
    if isinstance(found, Registry):
        return found
    return Registry({name: Entry(name, factory, _facts_for(name, factory, REGISTRY))
                     for name, factory in found.items()})


def create_pass(name: str, registry: Mapping[str, PassFactory] | None = None) -> Pass:
    return as_registry(registry).create(name)


def settings_of(record: PassRecord, registry: Mapping[str, PassFactory] | None = None
                ) -> PassSettings:
    """A manifest's pass record read back as its pass's settings class (keys that class does
    not declare are left in the record's JSON; a pass this infertune does not know reads as
    the empty base)."""
    return as_registry(registry).settings_type(record.name).from_dict(record.settings)


@dataclass(frozen=True)
class EngineVerdict(Serial):
    """One engine x precision (its passes grouped) on one machine: whether any of its passes
    applies there, and why, or what it would take (doctor prints these)."""

    engine: str  # "OpenVINO bf16"
    runtime: str
    precision: str
    device: str
    applies: bool
    why: str
    passes: tuple[str, ...]


def engines_on(hw: HardwareInfo, registry: Mapping[str, PassFactory] | None = None
               ) -> list[EngineVerdict]:
    """Every registered engine x precision judged on ``hw`` (its hardware rules and the
    libraries it lists as installed), CPU engines first, in a stable order."""
    groups: dict[tuple[str, str, str], list[Entry]] = {}
    for entry in as_registry(registry).entries():
        f = entry.facts
        if f.runtime != UNKNOWN.runtime:
            groups.setdefault((f.device, f.engine_name, f.precision), []).append(entry)
    return [_verdict(hw, entries) for _, entries in sorted(groups.items())]


def _verdict(hw: HardwareInfo, entries: list[Entry]) -> EngineVerdict:
    first = entries[0].facts
    runtime, precision, device = first.runtime, first.precision, first.device
    names = tuple(sorted(e.name for e in entries))
    title = first.title
    why_not = []
    # the pass a default plan builds first speaks for the group
    for e in sorted(entries, key=_plan_rank):
        req = e.facts.requires
        reason = req.reason(hw)
        missing = req.missing(hw)
        if reason is None and not missing:
            return EngineVerdict(title, runtime, precision, device, True,
                                 f"{req.basis(hw)}; {e.facts.summary}", names)
        why_not.append(reason or f"needs {' and '.join(missing)} installed (not found here)")
    return EngineVerdict(title, runtime, precision, device, False, why_not[0], names)


def _plan_rank(entry: Entry) -> tuple[int, str]:
    ranks = [p.rank for p in entry.facts.plans]
    return (min(ranks) if ranks else 1 << 30, entry.name)
