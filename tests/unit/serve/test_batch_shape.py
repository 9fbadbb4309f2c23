"""Which requests share a batch: the padding-cost fit and rule (batch_shape.py), and the
batcher applying it and its no-window-while-a-worker-is-idle rule, with the fake adapter."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from infertune.serve.batch_shape import BatchShape, PaddingCost, approx_tokens, length_bucket
from infertune.serve.batcher import LIVE_REFIT_EVERY, Batcher
from infertune.serve.prometheus_metrics import ServeMetrics
from infertune.serve.queue import RequestQueue, WorkItem
from infertune.serve.testing import GatedAdapter
from infertune.serve.warmup import PADDING_REPEATS, padding_batches


def test_approx_tokens_is_the_longest_text_at_four_characters_a_token() -> None:
    assert approx_tokens(["abcd", "a" * 9]) == 3
    assert approx_tokens([[1.0, 2.0]]) == 0  # not a text
    assert [length_bucket(n) for n in (0, 1, 15, 16, 17, 32, 33)] == [4, 4, 4, 4, 5, 5, 6]


def test_fit_recovers_fixed_and_per_token_cost_from_warmup_shapes() -> None:
    fixed, per_token = 0.013, 2e-5
    shapes = [(size, tokens) for tokens in (16, 32, 64, 128) for size in (1, 16)]
    cost = PaddingCost.fit([(s, t, fixed + per_token * s * t) for s, t in shapes])
    assert cost is not None
    assert cost.fixed_s == pytest.approx(fixed, rel=1e-6)
    assert cost.per_token_s == pytest.approx(per_token, rel=1e-6)


def test_fit_needs_two_shapes_and_a_cost_that_grows_with_tokens() -> None:
    assert PaddingCost.fit([(1, 16, 0.01), (1, 16, 0.012)]) is None
    assert PaddingCost.fit([(1, 16, 0.02), (16, 64, 0.01)]) is None  # longer was faster
    noise = [(1, 16, 3e-6), (16, 16, 1e-6), (1, 64, 1e-6), (16, 64, 2e-6), (1, 32, 3e-6)]
    assert PaddingCost.fit(noise) is None  # a fake model: no per-token cost to speak of


def test_merge_pays_when_the_pad_tokens_cost_less_than_another_batch() -> None:
    # 4 short (8 tokens) joining 4 long (24): 4 x 16 = 64 pad tokens
    assert PaddingCost(fixed_s=0.013, per_token_s=2e-5).merge_pays(4, 24, 4, 8)  # 1.3 ms
    assert not PaddingCost(fixed_s=0.001, per_token_s=2e-5).merge_pays(4, 24, 4, 8)
    assert PaddingCost(fixed_s=0.0, per_token_s=1.0).merge_pays(4, 24, 1, 24)  # no padding


def test_without_a_fit_only_the_same_power_of_two_bucket_joins() -> None:
    shape = BatchShape(1, 20, None)  # bucket 5: 17..32 tokens
    assert shape.admit(1, 30) and shape.tokens == 30 and shape.size == 2
    assert not shape.admit(1, 8)
    assert shape.size == 2  # a refused request leaves the shape alone


def _item(text: str, enqueued_at: float) -> WorkItem:
    return WorkItem([text], "normal", None, approx_tokens([text]), enqueued_at=enqueued_at,
                    future=asyncio.get_running_loop().create_future())


def _run_batches(texts: list[str], cost: PaddingCost | None) -> list[list[str]]:
    """Queue ``texts``, then let one worker batch them (batch size 8); the batches formed."""
    async def scenario() -> list[list[str]]:
        adapter = GatedAdapter()
        queue = RequestQueue(16, clock=time.monotonic, service_estimate=lambda n: 0.0)
        batcher = Batcher(adapter, queue, max_batch_size=8, max_wait_s=0.0, workers=1,
                          clock=time.monotonic, metrics=ServeMetrics())
        batcher.padding_cost = cost
        for text in texts:
            queue.put(_item(text, time.monotonic()))
        queue.close()
        await asyncio.wait_for(batcher.run(), 10)
        return adapter.seen

    return asyncio.run(scenario())


def test_the_batcher_merges_lengths_when_padding_is_cheap_and_splits_when_not() -> None:
    short, long = "s" * 8, "l" * 120  # 2 and 30 tokens: buckets 4 and 5
    texts = [short, long, short, long]
    cheap_padding = PaddingCost(fixed_s=0.013, per_token_s=1e-6)
    assert _run_batches(texts, cheap_padding) == [texts]
    dear_padding = PaddingCost(fixed_s=0.001, per_token_s=1e-4)
    assert _run_batches(texts, dear_padding) == [[short, short], [long, long]]
    assert _run_batches(texts, None) == [[short, short], [long, long]]


def _first_answer_s(workers: int, max_wait_s: float) -> float:
    """Seconds from queueing one request, on an idle batcher, to its answer."""
    async def scenario() -> float:
        queue = RequestQueue(16, clock=time.monotonic, service_estimate=lambda n: 0.0)
        batcher = Batcher(GatedAdapter(), queue, max_batch_size=8, max_wait_s=max_wait_s,
                          workers=workers, clock=time.monotonic, metrics=ServeMetrics())
        loop = asyncio.create_task(batcher.run())
        start = time.monotonic()
        item = _item("hello", start)
        queue.put(item)
        await asyncio.wait_for(item.future, 10)
        answered = time.monotonic() - start
        queue.close()
        await loop
        return answered

    return asyncio.run(scenario())


def test_a_lone_request_skips_the_window_while_another_worker_is_idle() -> None:
    assert _first_answer_s(workers=2, max_wait_s=5.0) < 2.0  # not held for the 5 s window
    assert _first_answer_s(workers=1, max_wait_s=0.3) >= 0.3  # the only worker: window kept


# The demo's int8 MiniLM served with one thread per worker (2-core AMX Xeon, 2026-12-06, one
# quiet round of the warm-up's batches): (batch size, approx tokens) -> seconds. Attention
# grows with the square of the length, so the long batches bend a line through all of them.
DEMO_WARMUP = {(1, 18): 0.00322, (16, 18): 0.01943, (1, 37): 0.00382, (16, 37): 0.03724,
               (1, 74): 0.00591, (16, 74): 0.08325, (1, 149): 0.01197, (16, 149): 0.23693,
               (1, 298): 0.02258, (16, 298): 0.45174}


def test_the_warmup_fit_takes_the_shortest_lengths_where_a_line_through_all_says_zero() -> None:
    batches = [(size, tokens, s) for (size, tokens), s in DEMO_WARMUP.items()]
    everything = PaddingCost.fit(batches)
    assert everything is not None and everything.fixed_s == 0.0  # the old rule: merge nothing
    cost = PaddingCost.from_warmup(batches)
    assert cost is not None
    # the line through the four short batches: about 2 ms a call and 60 us a padded token
    assert 0.0015 < cost.fixed_s < 0.0030 and 5e-5 < cost.per_token_s < 7e-5
    # one stalled timing among repeats moves the median, not the line
    stalled = [*batches, *[(1, 18, 0.00322)] * 3, (1, 18, 0.050)]
    assert PaddingCost.from_warmup(stalled) == cost
    assert cost.describe() == (f"merge lengths while the pad tokens cost under "
                               f"{cost.fixed_s * 1000:.2f} ms at {cost.per_token_s * 1e6:.2f} "
                               "us a token")


def test_the_warmup_times_its_two_shortest_lengths_again_for_the_padding_rule() -> None:
    batches = [["a" * 64] * n for n in (1, 8)] + [["b" * 256] * n for n in (1, 8)] \
        + [["c" * 1024] * n for n in (1, 8)]
    repeats = padding_batches(batches)
    assert len(repeats) == 4 * PADDING_REPEATS
    assert {approx_tokens(b) for b in repeats} == {16, 64}  # not the 256-token batches
    assert padding_batches([[[0.5, 1.0]], [[1.0, 2.0]] * 4]) == []  # not text


@dataclass
class _TimedAdapter(GatedAdapter):
    """The fake model on a fake clock: each call takes fixed_s + per_token_s x size x padded
    tokens (four characters a token), so the batcher times exactly that."""

    clock: list[float] = field(default_factory=lambda: [0.0])
    fixed_s: float = 0.002
    per_token_s: float = 5e-5

    def forward(self, inputs: Any) -> Any:
        out = super().forward(inputs)
        texts = self.seen[-1]
        self.clock[0] += self.fixed_s + self.per_token_s * len(texts) * approx_tokens(texts)
        return out


def test_served_batches_refit_the_padding_rule_a_bad_warmup_fit_left() -> None:
    """A warm-up that fitted no overhead (only equal lengths merge) is replaced, after
    LIVE_REFIT_EVERY served batches, by the line the served batches show."""
    async def scenario() -> Batcher:
        adapter = _TimedAdapter()
        clock = lambda: adapter.clock[0]  # noqa: E731 - the fake model moves it
        queue = RequestQueue(10_000, clock=clock, service_estimate=lambda n: 0.0)
        batcher = Batcher(adapter, queue, max_batch_size=8, max_wait_s=0.0, workers=1,
                          clock=clock, metrics=ServeMetrics())
        batcher.padding_cost = PaddingCost(fixed_s=0.0, per_token_s=1e-4)
        batcher.padding_source = "warm-up fit"
        lengths = [8, 40, 80, 160, 320]  # characters: 2 to 80 tokens
        for k in range(8 * LIVE_REFIT_EVERY + 8):
            queue.put(_item("x" * lengths[k % len(lengths)], clock()))
        queue.close()
        await asyncio.wait_for(batcher.run(), 30)
        return batcher

    batcher = asyncio.run(scenario())
    assert batcher.padding_cost is not None
    assert batcher.padding_cost.fixed_s == pytest.approx(0.002, rel=1e-6)
    assert batcher.padding_cost.per_token_s == pytest.approx(5e-5, rel=1e-6)
    assert batcher.padding_rule.endswith("served batches)")


def test_config_states_the_padding_rule_of_a_text_model_only() -> None:
    from starlette.testclient import TestClient

    from infertune.config import ServePolicy
    from infertune.serve.app import create_app

    def rule(adapter: GatedAdapter) -> str | None:
        with TestClient(create_app(adapter, ServePolicy(max_wait_ms=0))) as client:
            return client.get("/v1/config").json()["padding_rule"]  # type: ignore[no-any-return]

    # the fake's calls cost next to nothing, so which rule its warm-up fits varies; where it
    # came from does not
    text = rule(GatedAdapter())
    assert text is not None and text.endswith("warm-up fit, until served batches refit it)")
    tensor = GatedAdapter(info=dataclasses.replace(GatedAdapter().info, kind="tensor"))
    assert rule(tensor) is None  # no padding to rule on
