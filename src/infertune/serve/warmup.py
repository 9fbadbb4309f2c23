"""Warm-up: run representative batches of each shape bucket before saying ready.

The first call at a new shape pays for allocator growth, oneDNN primitive creation and (for
compiled runners) graph capture; running each bucket once at batch size 1 and at the maximum
batch size moves that cost out of the first users' latency.

OpenVINO pays it for every batch size, not only the two warmed: its CPU plugin prepares each
new input shape on the first inference at it. ``benchmarks/shape_warmup.py`` on the demo's
openvino_int8 (2 workers as served, batches up to 8, four lengths; 2-core Xeon with AMX,
2026-12-06, two runs of arms A B B A): after the warm-up of sizes 1 and max, the first calls at
sizes 2-7 took 1.39-2.00x as long in total as the second calls (a 12-word batch of 3: 25-27 ms
against 7-9 ms); after every size was warmed, 1.03-1.17x. onnxruntime's INT8 variant: 0.99-1.02x
either way. The demo's SLO p99 is 30 ms, so each size's first batch is a late answer.
``shape_batches`` adds the skipped sizes for such a runtime, cheapest first, and
``warm_shapes`` runs them within a time budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from infertune.data.text_inputs import TextPair
from infertune.models.adapter import Adapter
from infertune.serve.batch_shape import approx_tokens


def warmup_batches(adapter: Adapter, max_batch_size: int) -> list[list[Any]]:
    """The batches to run: for text, one per padding bucket up to the model's max length
    (texts of about that many tokens), at batch sizes 1 and max; otherwise sample inputs."""
    sizes = sorted({1, max_batch_size})
    if adapter.info.kind != "text":
        return [adapter.sample_inputs(n) for n in sizes]
    limit = adapter.info.max_length or 128
    pre = getattr(adapter, "pre", None)
    buckets = sorted({b for b in getattr(pre, "buckets", (16, 64, limit)) if b <= limit}) or [limit]
    base = adapter.sample_inputs(1)[0]
    batches = []
    for tokens in buckets:
        item = _stretched(base, tokens)
        batches.extend([[item] * n for n in sizes])
    return batches


# Extra timed runs of the two shortest lengths' batches, whose medians fit the padding rule
# (batch_shape.PaddingCost.from_warmup): one timing each, on a host where other servers were
# warming up too, fitted 0.0, 2.4 and 3.1 ms for three servers of one model started together
PADDING_REPEATS = 4


def padding_batches(batches: list[list[Any]]) -> list[list[Any]]:
    """``batches``' two shortest lengths (of text) again PADDING_REPEATS times, to be timed
    after them; [] for other inputs."""
    lengths = sorted({approx_tokens(b) for b in batches if approx_tokens(b) > 0})[:2]
    return [b for _ in range(PADDING_REPEATS) for b in batches if approx_tokens(b) in lengths]


# Runtimes whose first call at each batch size costs extra (measured: see the module docstring)
EVERY_SIZE_RUNTIMES = frozenset({"openvino"})
# Seconds the extra sizes may add to start-up: at batch 64 and five lengths they would take
# minutes; cheapest first, so a budget cut leaves the long, large batches cold, which are rare
SHAPE_WARMUP_BUDGET_S = 30.0


def shape_batches(adapter: Adapter, max_batch_size: int) -> list[list[Any]]:
    """The batch sizes ``warmup_batches`` skips (2 .. max-1) at each of its lengths, shortest
    length and smallest size first, for a runtime in EVERY_SIZE_RUNTIMES; [] for the others,
    whose first call at a size costs what the next does."""
    if adapter.info.runtime not in EVERY_SIZE_RUNTIMES or max_batch_size <= 2:
        return []
    sizes = range(2, max_batch_size)
    if adapter.info.kind != "text":
        return [adapter.sample_inputs(n) for n in sizes]
    items = [batch[0] for batch in warmup_batches(adapter, 1)]  # one per length bucket
    return [[item] * n for item in items for n in sizes]


def warm_shapes(adapter: Adapter, batches: list[list[Any]],
                budget_s: float = SHAPE_WARMUP_BUDGET_S,
                clock: Callable[[], float] = time.perf_counter) -> int:
    """Run ``batches`` in order until ``budget_s`` has passed; returns how many ran."""
    start = clock()
    for done, batch in enumerate(batches):
        if clock() - start >= budget_s:
            return done
        adapter.postprocess(adapter.forward(feeds := adapter.preprocess(batch)), feeds)
    return len(batches)


def _stretched(base: Any, tokens: int) -> Any:
    """``base`` repeated to about ``tokens`` words (roughly one token per word; the tokenizer
    truncates at max_length anyway); a (query, passage) pair keeps its query and stretches its
    passage, as long passages are what make a reranker's batches long."""
    if isinstance(base, TextPair):
        return TextPair(base.query, _stretched(base.passage, tokens))
    words = str(base).split()
    return " ".join((words * (tokens // max(1, len(words)) + 1))[:tokens])


def prime_on_this_thread(adapter: Adapter) -> None:
    """One small forward on the calling (main) thread, before any worker thread runs the model.

    Measured on this project's shared 2-core machine under load (05:26 UTC, servers running
    side by side, 3 interleaved rounds of 10 sequential single-sentence MiniLM requests, round
    medians): the serve app whose first torch call ran on its worker thread answered in 40, 117
    and 388 ms; the same app after one main-thread call in 32, 34 and 60 ms (a FastAPI endpoint
    that also made one: 30, 37, 57 ms). The likely cause is which thread first creates torch's
    OpenMP pool; the fix costs one small forward at start-up.
    """
    adapter.predict(adapter.sample_inputs(1))


def run_warmup(adapter: Adapter, batches: list[list[Any]]) -> int:
    """Run every batch through the full pipeline (in a worker thread); returns the count."""
    for batch in batches:
        adapter.postprocess(adapter.forward(feeds := adapter.preprocess(batch)), feeds)
    return len(batches)


def timed_warmup(adapter: Adapter, batches: list[list[Any]],
                 clock: Callable[[], float]) -> list[tuple[int, float]]:
    """run_warmup that also returns (batch size, seconds) per batch: the full-size batches
    seed the batcher's service estimate, so the default deadline is known before traffic."""
    times = []
    for batch in batches:
        start = clock()
        adapter.postprocess(adapter.forward(feeds := adapter.preprocess(batch)), feeds)
        times.append((len(batch), clock() - start))
    return times


def full_batch_seconds(times: list[tuple[int, float]], max_batch_size: int,
                       slowest: bool = False) -> float:
    """The median (or with ``slowest``, the longest) time of the warm-up batches of the
    maximum size, one per length bucket (0 when there were none)."""
    full = sorted(seconds for size, seconds in times if size == max_batch_size)
    if not full:
        return 0.0
    return full[-1] if slowest else full[len(full) // 2]
