"""The collector helpers: what exists is frozen out of full collections (for good at server
start, for the duration of a timed region), and a region gives it back."""

from __future__ import annotations

import gc

from infertune.measure.collector import freeze_startup_objects, steady_gc


def test_server_start_freezes_the_startup_objects() -> None:
    try:
        frozen = freeze_startup_objects()
        assert frozen > 1000 and gc.get_freeze_count() == frozen
        assert len(gc.get_objects()) < frozen  # a full collection no longer walks them
    finally:
        gc.unfreeze()


def test_a_timed_region_freezes_what_exists_and_gives_it_back() -> None:
    before = gc.get_freeze_count()
    existing = [[i] for i in range(1000)]  # tracked containers made before the region
    with steady_gc():
        assert gc.get_freeze_count() >= before + len(existing)
        made_inside = [[0]]
        assert any(o is made_inside for o in gc.get_objects())  # still collected normally
        assert not any(o is existing for o in gc.get_objects())
    assert gc.get_freeze_count() == before
    assert any(o is existing for o in gc.get_objects())
