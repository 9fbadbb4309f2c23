"""Which requests may share a batch: padding costs compute, a separate batch costs its overhead.

A batch of text is padded to its longest input, so mixing a short request into a batch of long
ones wastes compute on pad tokens; running it in a batch of its own instead pays the model's
per-call overhead again. Which is dearer depends on the model and the machine: an eager
PyTorch MiniLM on 2 AVX2 cores spends about 13 ms per call whatever the batch (batch 1: 16 ms,
batch 8: 36 ms, at about 20 tokens), so splitting short requests by length only multiplies
that overhead; an ONNX Runtime INT8 variant has little overhead and pays mostly per token.

``PaddingCost`` fits ``seconds = fixed_s + per_token_s x batch size x padded tokens``, and a
request joins a forming batch when the pad tokens it adds cost no more than ``fixed_s``. The
fit comes from two measurements on the machine that serves:

- at start, the warm-up's batches of its two shortest lengths (``from_warmup``). A line
  through every length is biased: attention grows with the square of the length, so the
  long batches bend the line up and its intercept comes out below zero. The demo's int8
  MiniLM on a 2-core AMX Xeon (2026-12-06): a batch of 16 took 19 ms at 18 tokens and
  450 ms at 298, and the line through all ten warm-up batches put ``fixed_s`` at 0.0 ms in
  four quiet rounds of four; three servers warming up side by side fitted 0.0, 19.3 and
  0.0 ms. At 0 only equal lengths share a batch (batches of 1.4 at 430 req/s), so the
  server's capacity depends on how its warm-up went;
- then the batches it serves (``Batcher``): every ``LIVE_REFIT_EVERY`` batches the line is
  fitted again to the last ``LIVE_FIT_BATCHES``, at the lengths the traffic sends and with
  what serving adds to each call (the event loop, the worker hand-off, the other workers on
  the same cores). Forcing ``fixed_s`` on that server at 470 req/s of held-out texts (20 s
  each, one run): 0 ms gave batches of 2.3 and a p99 of 203 ms, 2 ms batches of 4.3 and
  126 ms, 6 ms batches of 11.5 and 18% refused: the overhead has to be the served one.

Before a fit exists (warm-up off, or not run yet, or no clear per-token cost), requests share
a batch only within the same power-of-two length bucket (within 2x of each other).

Lengths are estimated without tokenizing (the event loop must stay cheap): about four
characters per token, as for English with a WordPiece or BPE vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

CHARS_PER_TOKEN = 4
SHORTEST_BUCKET = 16  # tokens: TextPreprocess's smallest padding bucket; shorter inputs share it
MIN_FIT_R2 = 0.8  # below this the warm-up shows no clear per-token cost (noise): no fit


def approx_tokens(inputs: Sequence[Any]) -> int:
    """Estimated tokens of the longest text among ``inputs`` (0 when none is a text); a
    (query, passage) pair, as sent ([q, p] or an object of two strings), counts both sides."""
    longest = max((_chars(x) for x in inputs), default=0)
    return math.ceil(longest / CHARS_PER_TOKEN)


def _chars(item: Any) -> int:
    if isinstance(item, str):
        return len(item)
    if isinstance(item, list | tuple) and len(item) == 2:
        return sum(len(x) for x in item if isinstance(x, str))
    if isinstance(item, dict) and len(item) == 2:
        return sum(len(x) for x in item.values() if isinstance(x, str))
    return 0


def length_bucket(tokens: int) -> int:
    """Power-of-two length bucket (lengths within 2x of each other mostly share one); every
    input up to SHORTEST_BUCKET tokens shares the first."""
    return math.ceil(math.log2(max(SHORTEST_BUCKET, tokens)))


@dataclass(frozen=True)
class PaddingCost:
    """Seconds of one batch ~= fixed_s + per_token_s * size * padded tokens (see the module
    docstring); fitted by least squares to measured batches."""

    fixed_s: float
    per_token_s: float

    @classmethod
    def fit(cls, batches: Sequence[tuple[int, int, float]]) -> PaddingCost | None:
        """From (batch size, padded tokens, seconds) triples; None without two distinct
        shapes, or when the times show no clear cost per token (a slope of zero or less, or
        a line explaining less than MIN_FIT_R2 of their variance: noise)."""
        cells = np.array([size * tokens for size, tokens, _ in batches], dtype=np.float64)
        seconds = np.array([s for _, _, s in batches], dtype=np.float64)
        if len(set(cells.tolist())) < 2:
            return None
        per_token, fixed = np.polyfit(cells, seconds, 1)
        residual = seconds - (fixed + per_token * cells)
        spread = float(np.sum((seconds - seconds.mean()) ** 2))
        if per_token <= 0 or spread == 0 or 1 - float(np.sum(residual**2)) / spread < MIN_FIT_R2:
            return None
        return cls(fixed_s=max(0.0, float(fixed)), per_token_s=float(per_token))

    @classmethod
    def from_warmup(cls, batches: Sequence[tuple[int, int, float]]) -> PaddingCost | None:
        """``fit`` over the warm-up batches of its two shortest lengths (see the module
        docstring for why not all of them), each shape timed several times at its median
        (a host busy for one call moves one timing, not the line)."""
        shortest = sorted({tokens for _, tokens, _ in batches})[:2]
        timed: dict[tuple[int, int], list[float]] = {}
        for size, tokens, seconds in batches:
            if tokens in shortest:
                timed.setdefault((size, tokens), []).append(seconds)
        return cls.fit([(size, tokens, float(np.median(times)))
                        for (size, tokens), times in timed.items()])

    def describe(self) -> str:
        return (f"merge lengths while the pad tokens cost under {self.fixed_s * 1000:.2f} ms "
                f"at {self.per_token_s * 1e6:.2f} us a token")

    def merge_pays(self, size: int, tokens: int, add_size: int, add_tokens: int) -> bool:
        """Whether ``add_size`` inputs of ``add_tokens`` tokens should join a batch of ``size``
        inputs padded to ``tokens``: the pad tokens the merge adds (the short side padded up
        to the long one) cost no more than a batch's fixed overhead."""
        wider = max(tokens, add_tokens)
        pad = (size + add_size) * wider - size * tokens - add_size * add_tokens
        return pad * self.per_token_s <= self.fixed_s


class BatchShape:
    """The shape of a forming batch and the rule for what may join it."""

    def __init__(self, size: int, tokens: int, cost: PaddingCost | None) -> None:
        self.size = size
        self.tokens = tokens
        self._bucket = length_bucket(tokens)
        self._cost = cost

    def admit(self, inputs: int, tokens: int) -> bool:
        """Join if the rule allows it (and grow the shape); False leaves it unchanged."""
        if self._cost is None:
            fits = length_bucket(tokens) == self._bucket
        else:
            fits = self._cost.merge_pays(self.size, self.tokens, inputs, tokens)
        if fits:
            self.size += inputs
            self.tokens = max(self.tokens, tokens)
        return fits
