"""What advise adds for a generation task: the token-level facts it asks for (TTFT and ITL
targets, prompt and output lengths) and a diagnosis that splits prefill from decode.

Time to first token (TTFT) is queueing plus the prefill: one forward pass over the whole prompt.
Inter-token latency (ITL) is decode: one forward step per output token, which reads every weight
and the KV cache and is shared with every sequence decoding alongside. The two respond to
different knobs (prefix caching and the prefill budget act on TTFT; batch size, quantized
weights and speculative decoding on ITL), so the report keeps them apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from infertune.config import Scenario
from infertune.report.knowledge import HardwareProfile
from infertune.report.schema import DiagnosisItem, Figure, MissingFact

BYTES_16BIT = 2.0
Likelihood = Literal["dominant", "minor", "unknown"]


@dataclass(frozen=True)
class GenerationGap:
    """A token-level fact a generation scenario leaves out."""

    path: tuple[str, ...]  # where it goes in the scenario
    fact: str
    would_change: str
    assumption: str

    def missing(self) -> MissingFact:
        return MissingFact(fact=self.fact, would_change=self.would_change,
                           assumption=self.assumption)


GAPS: tuple[GenerationGap, ...] = (
    GenerationGap(("slo", "ttft_p95_ms"), "slo.ttft_p95_ms",
                  "the time-to-first-token target (decides how much prefill and queueing may "
                  "cost)", "no TTFT target: prefill options are ranked by their effect on p95"),
    GenerationGap(("slo", "itl_p95_ms"), "slo.itl_p95_ms",
                  "the inter-token latency target (decides how many sequences may decode "
                  "together)", "no ITL target: decode options are ranked by their effect on p95"),
    GenerationGap(("inputs", "typical", "output_tokens"), "inputs.typical.output_tokens",
                  "output length (decode time is output tokens x ITL; it sizes the KV cache)",
                  "answers of unknown length, so the decode share of the latency is unknown"),
    GenerationGap(("inputs", "typical", "prompt_tokens"), "inputs.typical.prompt_tokens",
                  "prompt length (sets the prefill, hence TTFT, and the KV cache per request)",
                  "prompts of unknown length, so the prefill share of TTFT is unknown"),
)


def is_generation(sc: Scenario) -> bool:
    return sc.model.task == "generation"


def generation_gaps(sc: Scenario) -> list[GenerationGap]:
    """The token-level facts a generation scenario does not state (none for other tasks)."""
    if not is_generation(sc):
        return []
    typical = sc.inputs.typical
    stated = {
        "slo.ttft_p95_ms": sc.slo.ttft_p95_ms is not None or sc.slo.ttft_p99_ms is not None,
        "slo.itl_p95_ms": sc.slo.itl_p95_ms is not None or sc.slo.itl_p99_ms is not None,
        "inputs.typical.output_tokens": typical is not None and typical.output_tokens is not None,
        "inputs.typical.prompt_tokens": typical is not None and (
            typical.prompt_tokens is not None or typical.seq_len is not None),
    }
    return [g for g in GAPS if not stated[g.fact]]


def prefill_and_decode(sc: Scenario, hw: HardwareProfile) -> tuple[list[DiagnosisItem],
                                                                   dict[str, Figure], str]:
    """(diagnosis items, figures, one summary sentence) splitting prefill from decode."""
    typical = sc.inputs.typical
    prompt = (typical.prompt_tokens or typical.seq_len) if typical else None
    output = typical.output_tokens if typical else None
    cur, slo = sc.current, sc.slo
    ttft_miss = _misses((cur.ttft_p95_ms, slo.ttft_p95_ms), (cur.ttft_p99_ms, slo.ttft_p99_ms))
    itl_miss = _misses((cur.itl_p95_ms, slo.itl_p95_ms), (cur.itl_p99_ms, slo.itl_p99_ms))
    prompt_text = f"the {prompt}-token prompt" if prompt else "the whole prompt"
    items = [
        DiagnosisItem(
            stage="prefill (time to first token)", likelihood=_likelihood(ttft_miss),
            reason=f"queueing plus one forward pass over {prompt_text} before the first token; "
                   "it grows with prompt length and with the prefills scheduled ahead"
                   + _verdict("TTFT", ttft_miss)),
        DiagnosisItem(
            stage="decode (inter-token latency)", likelihood=_likelihood(itl_miss),
            reason="one forward step per output token, reading every weight and the KV cache, "
                   "shared with every sequence decoding alongside"
                   + (f"; {output} output tokens make decode most of each answer's time"
                      if output and output > 1 else "") + _verdict("ITL", itl_miss)),
    ]
    figures: dict[str, Figure] = {}
    itl = cur.itl_p95_ms or slo.itl_p95_ms
    if output and output > 1 and itl:
        which = "stated current" if cur.itl_p95_ms else "target"
        figures["decode_time_per_answer"] = Figure(
            value=round((output - 1) * itl, 1), unit="ms per answer", source="estimate",
            basis=f"estimate: (stated output tokens {output} - 1) x {which} ITL p95 {itl:g} ms; "
                  "the decode time of a typical answer if every gap were at p95")
    params = sc.model.parameters_millions
    if params and hw.gpu_memory_gb:
        weights = params * 1e6 * BYTES_16BIT / 1e9
        figures["weights_16bit_share_of_gpu"] = Figure(
            value=round(weights / hw.gpu_memory_gb, 2), unit="x GPU memory", source="estimate",
            basis=f"estimate: {params:g} M parameters x 2 bytes = {weights:.1f} GB of 16-bit "
                  f"weights against {hw.gpu_memory_gb:g} GB of GPU memory; the rest holds the "
                  "KV cache, which bounds how many sequences decode together")
    return items, figures, _summary(ttft_miss, itl_miss)


def _misses(*pairs: tuple[float | None, float | None]) -> bool | None:
    """True when any stated current figure is above its target, False when all stated ones
    meet theirs, None when no percentile has both."""
    verdicts = [cur > target for cur, target in pairs if cur is not None and target is not None]
    return any(verdicts) if verdicts else None


def _likelihood(miss: bool | None) -> Likelihood:
    if miss is None:
        return "unknown"
    return "dominant" if miss else "minor"


def _verdict(name: str, miss: bool | None) -> str:
    if miss is None:
        return f"; current {name} or its target is not stated"
    return f"; the stated current {name} {'misses' if miss else 'meets'} its target"


def _summary(ttft_miss: bool | None, itl_miss: bool | None) -> str:
    lead = ("For generation, time to first token is prefill (queueing plus one pass over the "
            "prompt) and inter-token latency is decode (one step per token)")
    if ttft_miss and itl_miss:
        return lead + "; both miss their targets, so work on both."
    if ttft_miss:
        return lead + "; TTFT misses its target while ITL does not, so work on prefill."
    if itl_miss:
        return lead + "; ITL misses its target while TTFT does not, so work on decode."
    if ttft_miss is False and itl_miss is False:
        return lead + "; both meet their targets."
    return lead + "; measure both (loadtest --api openai-chat) to see which one misses."
