"""Stage "input options" of ``optimize`` (the last): the response-cache estimate, and input
trimming and length bucketing timed on the chosen variant (served/input_options.py measures
them)."""

from __future__ import annotations

from infertune.data.text_inputs import is_text_input
from infertune.measure.compare import run_interleaved
from infertune.optimize.findings import InputsArtifact
from infertune.optimize.search.choice import best_adapter
from infertune.optimize.served.input_options import (
    InputOptions,
    cache_estimate,
    measure_bucketing,
    measure_trimming,
    trim_length_for,
)
from infertune.optimize.state import StageContext

NEED_INPUTS_S = 10.0


def run(ctx: StageContext) -> InputsArtifact:
    """The response-cache estimate, then trimming and bucketing timed on the chosen variant
    (text models only)."""
    state, budget, progress = ctx.state, ctx.budget, ctx.progress
    data = state.options.data
    notes: list[str] = []
    cache = cache_estimate(data.inputs, f"held-out data {data.source}")
    opts = InputOptions(cache, None, None, None, None, notes)
    found = InputsArtifact(input_options=opts)
    variant_id, adapter = best_adapter(state)
    texts = [x for x in data.inputs if is_text_input(x)]
    if not texts or not hasattr(adapter, "pre") or not hasattr(adapter, "token_lengths"):
        notes.append("input trimming and length bucketing apply to text models only")
        return found
    lengths = adapter.token_lengths(texts)
    opts.trim_length, opts.truncated_share = trim_length_for(lengths, keep=0.99)
    current = adapter.pre.max_length
    if not budget.allows(2 * NEED_INPUTS_S):
        state.skip("input trimming and bucketing timings", "time budget exhausted",
                   2 * NEED_INPUTS_S)
        return found
    per = min(budget.share(0.4), 12.0)
    if opts.trim_length < current:
        progress.tick(f"timing input trimming on {variant_id}")
        opts.trimming = measure_trimming(adapter, texts, opts.trim_length, compare=run_interleaved,
                                         budget_s=per / 2, seed=state.options.seed)
    else:
        notes.append(f"the 99th-percentile input ({opts.trim_length} tokens) already fits the "
                     f"max length {current}; trimming would cut nothing worth measuring")
    if len(texts) >= 32:
        progress.tick(f"timing length bucketing on {variant_id}")
        opts.bucketing = measure_bucketing(adapter, texts, lengths, compare=run_interleaved,
                                           budget_s=per / 2, seed=state.options.seed)
    return found
