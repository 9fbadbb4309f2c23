"""The shipped LLM server's prefix cache (``llmserver --prefix-cache``): the KV cache of recent
prompts, kept after their prefill, so that a new prompt that starts with the same tokens
prefills only the rest.

Matching is by blocks of ``block`` tokens, as vLLM's automatic prefix caching matches whole KV
blocks: a prompt reuses the longest run of whole blocks it shares with one kept prompt, and at
least its last token is always prefilled (the logits of the next token come from it). So the
prefill a hit saves is predictable: ``reused`` tokens out of the prompt's length, and a test
can state it before it sends anything. Entries are evicted least recently used.

The kept caches are copies (a sequence's own cache grows as it decodes), and a hit is handed a
copy cut to the reused length, so no two sequences ever share a mutable cache.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

BLOCK_TOKENS = 16
MAX_ENTRIES = 64


@dataclass(frozen=True)
class PrefixHit:
    cache: Any  # a transformers Cache holding the first ``reused`` positions, or None
    reused: int  # prompt tokens whose KV come from the cache (a multiple of the block)


def shared_blocks(a: tuple[int, ...], b: list[int], block: int) -> int:
    """Tokens at the start of ``b`` equal to ``a``'s, rounded down to whole blocks, leaving
    at least the last token of ``b`` to prefill."""
    limit = min(len(a), len(b) - 1)
    n = 0
    while n < limit and a[n] == b[n]:
        n += 1
    return (n // block) * block


class PrefixCache:
    """An LRU of prompt -> KV cache after its prefill; used by one engine thread only."""

    def __init__(self, block: int = BLOCK_TOKENS, max_entries: int = MAX_ENTRIES) -> None:
        if block < 1 or max_entries < 1:
            raise ValueError("the prefix cache needs block >= 1 and max_entries >= 1")
        self.block, self.max_entries = block, max_entries
        self._entries: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self.hits = 0
        self.lookups = 0
        self.reused_tokens = 0

    def lookup(self, prompt: list[int]) -> PrefixHit:
        """The longest whole-block prefix of ``prompt`` that a kept prompt shares."""
        self.lookups += 1
        best_key, best = None, 0
        for key in self._entries:
            n = shared_blocks(key, prompt, self.block)
            if n > best:
                best_key, best = key, n
        if best_key is None:
            return PrefixHit(None, 0)
        self._entries.move_to_end(best_key)
        cache = copy.deepcopy(self._entries[best_key])
        cache.crop(best - cache.get_seq_length())  # a negative count drops that many positions
        self.hits += 1
        self.reused_tokens += best
        return PrefixHit(cache, best)

    def keep(self, prompt: list[int], cache: Any) -> None:
        """Keep a copy of ``cache``, the KV of exactly ``prompt`` (taken right after prefill)."""
        key = tuple(prompt)
        if len(key) < self.block:
            return  # shorter than one block: nothing a later prompt could reuse
        self._entries[key] = copy.deepcopy(cache)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
