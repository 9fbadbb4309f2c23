"""optimize/state.py VariantAdapters: a run's variants load on use, one at a time, so a
variant is never timed beside another's leftover runtime threads; one set directly stays."""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import pytest

from infertune.optimize.state import VariantAdapters


class _Adapter:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.me = self  # a reference cycle, as runtime sessions have: freed by gc, not refcount


def test_a_variant_loads_on_use_and_releases_the_one_used_before() -> None:
    loads: list[Path] = []

    def loader(folder: Path) -> Any:
        loads.append(folder)
        return _Adapter(folder)

    adapters = VariantAdapters(loader)
    adapters.add("int8", Path("v/int8"))
    adapters.add("fused", Path("v/fused"))
    assert loads == [] and "int8" in adapters and len(adapters) == 2  # nothing loaded yet
    int8 = adapters["int8"]
    assert adapters["int8"] is int8 and loads == [Path("v/int8")]  # loaded once while in use
    gone = weakref.ref(int8)
    del int8
    fused = adapters["fused"]
    assert gone() is None, "the variant used before was not freed"
    assert fused.folder == Path("v/fused")
    assert adapters["int8"].folder == Path("v/int8")  # reloaded on its next use
    assert loads == [Path("v/int8"), Path("v/fused"), Path("v/int8")]


def test_an_adapter_set_directly_is_kept_and_unknown_ids_are_key_errors() -> None:
    adapters = VariantAdapters(lambda folder: _Adapter(folder))
    kept = _Adapter(Path("given"))
    adapters["given"] = kept
    adapters.add("int8", Path("v/int8"))
    adapters["int8"]
    assert adapters["given"] is kept  # no folder to reload it from: never released
    assert list(adapters) == ["given", "int8"]
    with pytest.raises(KeyError):
        adapters["missing"]
    del adapters["int8"]
    assert "int8" not in adapters and len(adapters) == 1
    with pytest.raises(KeyError):
        del adapters["int8"]
