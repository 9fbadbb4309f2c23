"""HDR latency histogram in integer microseconds: mergeable, compact to serialise.

The ``hdrhistogram`` package silently refuses values outside its trackable range
(``record_value`` returns False). A refused latency would vanish from every percentile, which is
exactly the stall a user needs to see, so we clamp it to the nearest trackable value, record it
there, and count it in ``clamped`` (reported beside every percentile drawn from this histogram).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # one hour: no inference latency worth tracking is longer
SIGNIFICANT_FIGURES = 3
_ENCODING_PREFIX = "hdr1"


@dataclass
class LatencyHistogram:
    """Latencies in integer microseconds (3 significant figures) with a count of clamped values."""

    highest_us: int = HIGHEST_US
    clamped: int = 0
    _hdr: HdrHistogram | None = None

    def __post_init__(self) -> None:
        if self._hdr is None:
            self._hdr = HdrHistogram(LOWEST_US, self.highest_us, SIGNIFICANT_FIGURES)

    @property
    def hdr(self) -> HdrHistogram:
        assert self._hdr is not None
        return self._hdr

    def record_us(self, value_us: float, count: int = 1) -> None:
        value = int(round(value_us))
        if value < 0 or value > self.highest_us:
            self.clamped += count
            value = min(max(value, 0), self.highest_us)
        if not self.hdr.record_value(value, count):
            # Cannot happen after clamping; failing loudly beats losing a sample.
            raise ValueError(f"hdrhistogram refused {value} us after clamping")

    def record_ms(self, value_ms: float, count: int = 1) -> None:
        if math.isnan(value_ms):
            raise ValueError("latency is NaN; a timer produced no value")
        self.record_us(value_ms * 1000.0, count)

    @classmethod
    def from_ms(cls, values_ms: Iterable[float]) -> LatencyHistogram:
        hist = cls()
        for value in values_ms:
            hist.record_ms(float(value))
        return hist

    @property
    def count(self) -> int:
        return int(self.hdr.get_total_count())

    def percentile_ms(self, percentile: float) -> float:
        """The value at ``percentile`` (0-100), in ms, to HDR precision (0.1% of the value)."""
        return self.hdr.get_value_at_percentile(percentile) / 1000.0

    def mean_ms(self) -> float:
        return self.hdr.get_mean_value() / 1000.0

    def min_ms(self) -> float:
        return self.hdr.get_min_value() / 1000.0

    def max_ms(self) -> float:
        return self.hdr.get_max_value() / 1000.0

    def merge(self, other: LatencyHistogram) -> LatencyHistogram:
        """Add ``other`` into this histogram (in place) and return self."""
        if other.highest_us > self.highest_us:
            raise ValueError("cannot merge a wider histogram into a narrower one")
        self.hdr.add(other.hdr)
        self.clamped += other.clamped
        return self

    def encode(self) -> str:
        """``hdr1:<clamped>:<base64 HdrHistogram V2 compressed payload>``."""
        payload = self.hdr.encode()
        text = payload.decode("ascii") if isinstance(payload, bytes) else str(payload)
        return f"{_ENCODING_PREFIX}:{self.clamped}:{text}"

    @classmethod
    def decode(cls, text: str) -> LatencyHistogram:
        prefix, clamped, payload = text.split(":", 2)
        if prefix != _ENCODING_PREFIX:
            raise ValueError(f"not an infertune histogram encoding (prefix {prefix!r})")
        hdr = HdrHistogram.decode(payload.encode("ascii"))
        return cls(highest_us=int(hdr.highest_trackable_value), clamped=int(clamped), _hdr=hdr)

    def equals(self, other: LatencyHistogram) -> bool:
        return self.clamped == other.clamped and bool(self.hdr.equals(other.hdr))

    # why hand-written: the counts travel as one HDR-encoded string, not as fields
    def to_dict(self) -> dict[str, Any]:
        return {"unit": "us", "significant_figures": SIGNIFICANT_FIGURES,
                "count": self.count, "clamped": self.clamped, "encoded": self.encode()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LatencyHistogram:
        return cls.decode(data["encoded"])
