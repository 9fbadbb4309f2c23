"""Padding waste for sequence models: how many of the tokens the model computes on are
padding, when the data is sent in batches of the typical size.

Rule: the data (in its file order, which is the order requests would arrive in a replay) is cut
into consecutive batches of ``batch_size``; each batch is padded to ``padded_length(longest)``
(the adapter's padding policy: longest / max_length / bucket); waste = 1 - real / padded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from infertune.serial import Serial


@dataclass
class PaddingWaste(Serial):
    DERIVED = ("waste_percent",)

    batch_size: int
    batches: int
    real_tokens: int
    padded_tokens: int
    padding: str  # the adapter's padding policy
    truncated_inputs: int  # inputs longer than max_length (their extra tokens are dropped)

    @property
    def waste_fraction(self) -> float:
        return 1.0 - self.real_tokens / self.padded_tokens if self.padded_tokens else 0.0

    @property
    def waste_percent(self) -> float:
        return 100.0 * self.waste_fraction


def padding_waste(token_lengths: Sequence[int], batch_size: int, *, max_length: int,
                  padded_length: Callable[[int], int] = lambda longest: longest,
                  padding: str = "longest") -> PaddingWaste:
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not token_lengths:
        raise ValueError("no token lengths to analyse")
    lengths = [min(int(n), max_length) for n in token_lengths]
    real = padded = batches = 0
    for start in range(0, len(lengths), batch_size):
        chunk = lengths[start:start + batch_size]
        real += sum(chunk)
        padded += len(chunk) * padded_length(max(chunk))
        batches += 1
    return PaddingWaste(batch_size=batch_size, batches=batches, real_tokens=real,
                        padded_tokens=padded, padding=padding,
                        truncated_inputs=sum(1 for n in token_lengths if n > max_length))
