"""The garbage collector during measurement and serving.

A process that has imported torch and transformers and loaded a model holds ~410k objects the
collector tracks. A full collection walks them all: 195 ms for minilm loaded alone, and up to
245 ms (eight of them) in one 37-second `optimize --quick` run. It stalls every thread, so one
that lands inside a timed call or a load test bills a random request for it.

A server never frees those startup objects, so ``serve`` freezes them once before serving
(``freeze_startup_objects``); timed regions do the same for their duration (``steady_gc``),
so the figures they produce are the ones such a server would see: the collector still runs,
at its normal cost for the objects the workload itself creates.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


def freeze_startup_objects() -> int:
    """Collect once, then move every object alive now out of the collector's reach for the
    rest of the process; returns how many were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


@contextlib.contextmanager
def steady_gc() -> Iterator[None]:
    """Freeze what exists at entry (O(1), no collection) and give it back at exit."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
