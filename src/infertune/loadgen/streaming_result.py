"""What a streaming (token-by-token) load test measured: per-request StreamRecords and the
StreamingResult summarised from them, with token-level SLOs and goodput.

Every time is an offset from the start of the test, and every per-request figure is taken from
the request's *intended* send time, as in result.py: a stall before the first token lands in
time to first token (TTFT) of every request that should have been sent during it.

    TTFT    first content token received - intended send
    ITL     each gap between consecutive content tokens (pooled over requests for percentiles;
            their CIs resample whole requests, whose gaps correlate)
    TPOT    (last token - first token) / (output tokens - 1), per request
    e2e     last byte received - intended send

Token-level SLOs are written ``ttft_p95_ms=500,itl_p95_ms=50`` (metrics ttft, itl, tpot, e2e;
percentiles p50, p90, p95, p99). A run *meets* one when the run's percentile is at or below the
limit. Goodput counts the requests that meet every SLO on their own: TTFT, TPOT and e2e by the
request's value, ITL by the request's own gaps at the SLO's percentile (DistServe's per-request
definition of goodput, Zhong et al., OSDI 2024).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from infertune.errors import ConfigError
from infertune.loadgen.result import LoadResult, is_ok
from infertune.measure.summary import LatencySummary, percentile_key
from infertune.serial import Serial

Metric = Literal["ttft", "itl", "tpot", "e2e"]
TokenSource = Literal["usage", "tokenizer", "approximate"]
METRICS: tuple[Metric, ...] = ("ttft", "itl", "tpot", "e2e")
SLO_PERCENTILES = (50.0, 90.0, 95.0, 99.0)
N_BOOT = 200


@dataclass(frozen=True)
class TokenSLO(Serial):
    """One token-level target: ``metric`` at ``percentile`` at or below ``limit_ms``."""

    metric: Metric
    percentile: float
    limit_ms: float

    @property
    def key(self) -> str:
        return f"{self.metric}_{percentile_key(self.percentile)}_ms"


def parse_slos(text: str) -> list[TokenSLO]:
    """``"ttft_p95_ms=500,itl_p95_ms=50"`` -> two TokenSLOs; a one-line ConfigError otherwise."""
    known = ", ".join(f"{m}_p{int(p)}_ms" for m in METRICS for p in (95, 99))
    out: list[TokenSLO] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, raw = part.partition("=")
        pieces = name.strip().lower().split("_")
        if not sep or len(pieces) != 3 or pieces[2] != "ms" or not pieces[1].startswith("p"):
            raise ConfigError(f"--slo {part!r} is not understood; write NAME=MS such as "
                              f"ttft_p95_ms=500 (names: {known}, ...)")
        metric, pct_text = pieces[0], pieces[1][1:]
        if metric not in METRICS:
            raise ConfigError(f"--slo {part!r}: there is no metric {metric!r}; use one of "
                              f"{', '.join(METRICS)}")
        try:
            percentile = float(pct_text)
            limit = float(raw)
        except ValueError:
            raise ConfigError(f"--slo {part!r}: percentile and limit must be numbers, e.g. "
                              "itl_p95_ms=50") from None
        if percentile not in SLO_PERCENTILES:
            raise ConfigError(f"--slo {part!r}: percentile p{pct_text} is not offered; use "
                              "p50, p90, p95 or p99")
        if not limit > 0:
            raise ConfigError(f"--slo {part!r}: the limit must be > 0 ms")
        out.append(TokenSLO(metric, percentile, limit))
    if not out:
        raise ConfigError("--slo is empty; write it like ttft_p95_ms=500,itl_p95_ms=50")
    return out


@dataclass
class StreamRecord(Serial):
    """One streamed request. Offsets are seconds from the start of the test."""

    index: int
    intended_s: float
    sent_s: float
    done_s: float
    status: str
    token_s: list[float] = field(default_factory=list)  # arrival of each content token
    output_tokens: int = 0  # from usage, a tokenizer, or the count of content events
    prompt_tokens: int | None = None
    token_source: TokenSource = "approximate"
    server_timing_ms: dict[str, float] = field(default_factory=dict)
    server_gaps_ms: list[float] = field(default_factory=list)  # the server's own, if it says
    cached_tokens: int | None = None  # prompt tokens the server's prefix cache reused, if it says

    @property
    def ok(self) -> bool:
        return is_ok(self.status) and bool(self.token_s)

    @property
    def ttft_ms(self) -> float | None:
        return (self.token_s[0] - self.intended_s) * 1000.0 if self.token_s else None

    @property
    def gaps_ms(self) -> list[float]:
        return [(b - a) * 1000.0 for a, b in zip(self.token_s, self.token_s[1:], strict=False)]

    @property
    def tpot_ms(self) -> float | None:
        if len(self.token_s) < 1 or self.output_tokens < 2:
            return None
        return (self.token_s[-1] - self.token_s[0]) * 1000.0 / (self.output_tokens - 1)

    @property
    def e2e_ms(self) -> float:
        return (self.done_s - self.intended_s) * 1000.0

    def value(self, slo: TokenSLO) -> float | None:
        """This request's own figure for ``slo`` (None: it has none, e.g. one token, no gap)."""
        if slo.metric == "ttft":
            return self.ttft_ms
        if slo.metric == "e2e":
            return self.e2e_ms
        if slo.metric == "tpot":
            return self.tpot_ms
        gaps = self.gaps_ms
        return float(np.percentile(gaps, slo.percentile)) if gaps else None

    def meets(self, slos: list[TokenSLO]) -> bool:
        if not self.ok:
            return False
        return all((v := self.value(s)) is None or v <= s.limit_ms for s in slos)


def per_request(r: StreamRecord) -> dict[str, Any]:
    """One request's figures in ms (to the microsecond) for a results file; offsets in s."""
    def ms(v: float | None) -> float | None:
        return round(v, 3) if v is not None else None

    return {"index": r.index, "status": r.status, "intended_s": round(r.intended_s, 6),
            "lag_ms": ms((r.sent_s - r.intended_s) * 1000.0), "ttft_ms": ms(r.ttft_ms),
            "gaps_ms": [round(g, 3) for g in r.gaps_ms], "tpot_ms": ms(r.tpot_ms),
            "e2e_ms": ms(r.e2e_ms), "output_tokens": r.output_tokens,
            "prompt_tokens": r.prompt_tokens, "token_source": r.token_source}


@dataclass
class SloVerdict(Serial):
    slo: TokenSLO
    measured_ms: float | None  # the run's percentile; None when nothing was measured
    met: bool


@dataclass
class TokenCounts(Serial):
    total: int
    mean: float
    min: int
    max: int
    source: TokenSource  # "approximate": content events counted, no usage, no tokenizer


@dataclass
class StreamingResult(Serial):
    """A streaming run: the request-level LoadResult (e2e latency, client lag, statuses) plus
    the token-level figures; ``meets_slos`` is written beside them (ignored on reading)."""

    DERIVED = ("meets_slos",)

    api: str
    load: LoadResult
    ttft: LatencySummary | None
    itl: LatencySummary | None
    tpot: LatencySummary | None
    output_tokens: TokenCounts | None
    output_tokens_per_s: float  # over successful requests, / max(duration, last completion)
    requests_per_s: float  # successful completions per second
    slos: list[SloVerdict]
    goodput_rps: float  # requests meeting every SLO per second (no SLOs: every success)
    goodput_share: float  # of all sent requests
    warnings: list[str] = field(default_factory=list)
    prompt_tokens: TokenCounts | None = None  # only when the server's usage reported them

    @property
    def meets_slos(self) -> bool | None:
        return all(v.met for v in self.slos) if self.slos else None


def summarise_streams(api: str, load: LoadResult, records: list[StreamRecord],
                      slos: list[TokenSLO] | None = None, *, seed: int = 0) -> StreamingResult:
    """The StreamingResult of one run: ``load`` summarises the same requests at request level."""
    slos = slos or []
    ok = [r for r in records if r.ok]
    ttfts = [v for r in ok if (v := r.ttft_ms) is not None]
    gaps = [r.gaps_ms for r in ok if r.gaps_ms]  # one group per answer: they correlate
    tpots = [v for r in ok if (v := r.tpot_ms) is not None]
    window = max(load.schedule.duration_s, max((r.done_s for r in ok), default=0.0))
    counts = _token_counts(ok)
    itl = LatencySummary.from_groups(gaps) if gaps else None
    summaries = {"ttft": _summary(ttfts, seed), "itl": itl,
                 "tpot": _summary(tpots, seed)}
    verdicts = [_verdict(s, summaries, load) for s in slos]
    # with no SLO every completed request is good: goodput is then the completion rate
    good = sum(1 for r in ok if r.meets(slos))
    warnings = _warnings(records, ok, counts)
    return StreamingResult(
        api=api, load=load, ttft=summaries["ttft"], itl=summaries["itl"],
        tpot=summaries["tpot"], output_tokens=counts,
        output_tokens_per_s=(counts.total / window) if counts and window > 0 else 0.0,
        requests_per_s=len(ok) / window if window > 0 else 0.0, slos=verdicts,
        goodput_rps=good / window if window > 0 else 0.0,
        goodput_share=good / len(records) if records else 0.0,
        warnings=warnings, prompt_tokens=_prompt_counts(ok),
    )


def _prompt_counts(ok: list[StreamRecord]) -> TokenCounts | None:
    values = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    if not ok or len(values) < len(ok):
        return None
    return TokenCounts(total=sum(values), mean=sum(values) / len(values), min=min(values),
                       max=max(values), source="usage")


def _summary(values: list[float], seed: int) -> LatencySummary | None:
    return LatencySummary.from_values(values, rng_seed=seed, n_boot=N_BOOT) if values else None


def _verdict(slo: TokenSLO, summaries: dict[str, LatencySummary | None],
             load: LoadResult) -> SloVerdict:
    summary = load.latency if slo.metric == "e2e" else summaries[slo.metric]
    if summary is None:
        return SloVerdict(slo, None, False)
    measured = summary.percentiles[percentile_key(slo.percentile)].value
    return SloVerdict(slo, measured, measured <= slo.limit_ms)


def _token_counts(ok: list[StreamRecord]) -> TokenCounts | None:
    if not ok:
        return None
    values = [r.output_tokens for r in ok]
    sources = {r.token_source for r in ok}
    # The weakest source any request used labels the whole count.
    source: TokenSource = next(s for s in ("approximate", "tokenizer", "usage") if s in sources)
    return TokenCounts(total=sum(values), mean=sum(values) / len(values), min=min(values),
                       max=max(values), source=source)


def _warnings(records: list[StreamRecord], ok: list[StreamRecord],
              counts: TokenCounts | None) -> list[str]:
    out: list[str] = []
    if counts is not None and counts.source == "approximate":
        out.append("output token counts are approximate: the server sent no usage and no "
                   "--tokenizer was given, so each streamed content event counts as one token")
    merged = sum(1 for r in ok if r.token_source != "approximate"
                 and r.output_tokens > len(r.token_s))
    if merged:
        out.append(f"{merged} request(s) streamed fewer events than tokens (the server sends "
                   "several tokens per event), so inter-token gaps are per event; TPOT uses "
                   "the token count")
    empty = sum(1 for r in records if is_ok(r.status) and not r.token_s)
    if empty:
        out.append(f"{empty} request(s) answered 2xx without a single content token; they "
                   "count as failures here (check the API kind with --api and the route)")
    return out
