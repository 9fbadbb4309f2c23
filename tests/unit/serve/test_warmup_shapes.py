"""serve's warm-up runs every batch size for a runtime that prepares each new shape on its first
call (OpenVINO: serve/warmup.py measures it), within a time budget, and only the sizes 1 and max
for the others."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest

from infertune.config import ServePolicy
from infertune.serve.prometheus_metrics import ServeMetrics
from infertune.serve.runtime import ServeRuntime
from infertune.serve.testing import GatedAdapter
from infertune.serve.warmup import shape_batches, warm_shapes


def _adapter(runtime: str) -> GatedAdapter:
    plain = GatedAdapter()
    return GatedAdapter(info=replace(plain.info, runtime=runtime))


def _shapes(batches: list[list[str]]) -> list[tuple[int, int]]:
    """(batch size, words in its texts) per batch, in order."""
    return [(len(b), len(b[0].split())) for b in batches]


def test_shape_batches_are_the_sizes_between_one_and_max_at_each_length_cheapest_first() -> None:
    # the fake's length buckets are 16 and 64 words (its max_length)
    assert _shapes(shape_batches(_adapter("openvino"), 5)) == [
        (2, 16), (3, 16), (4, 16), (2, 64), (3, 64), (4, 64)]
    assert shape_batches(_adapter("onnxruntime"), 5) == []  # its first call costs the next's
    assert shape_batches(_adapter("openvino"), 2) == []  # no size between 1 and 2


def test_warm_shapes_stops_when_its_budget_is_spent() -> None:
    adapter = _adapter("openvino")
    ticks = iter(range(100))  # the clock advances one second per reading
    batches = shape_batches(adapter, 5)
    assert warm_shapes(adapter, batches, budget_s=2.5, clock=lambda: float(next(ticks))) == 2
    assert _shapes(adapter.seen) == _shapes(batches[:2])
    assert warm_shapes(_adapter("openvino"), batches, budget_s=60) == len(batches)


@pytest.mark.parametrize("runtime, sizes", [
    ("openvino", {1, 2, 3, 4, 5}),
    ("onnxruntime", {1, 5}),
])
def test_serve_warms_every_batch_size_only_where_the_runtime_pays_per_shape(
        runtime: str, sizes: set[int], caplog: pytest.LogCaptureFixture) -> None:
    adapter = _adapter(runtime)

    async def start() -> None:
        runtime_ = ServeRuntime(adapter, ServePolicy(max_batch_size=5, cache_size=0),
                                clock=time.monotonic, metrics=ServeMetrics())
        await runtime_.start()
        while not runtime_.ready and runtime_.warmup_error is None:
            await asyncio.sleep(0.01)
        assert runtime_.warmup_error is None
        await runtime_.stop()

    with caplog.at_level("INFO", logger="infertune"):
        asyncio.run(start())
    warmed = set(_shapes(adapter.seen))
    assert warmed == {(n, words) for n in sizes for words in (16, 64)}
    said = [r.getMessage() for r in caplog.records if "every batch size" in r.getMessage()]
    assert bool(said) == (runtime == "openvino"), said
