"""Input trimming and length bucketing for text models.

Trimming lowers max_length to a percentile of the held-out token lengths and records the
share of held-out inputs it would truncate. Bucketing pads each batch to the next bucket
length, so runtimes that specialise on shapes see a handful of them."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from infertune.errors import NotApplicableError
from infertune.models.text import TextAdapter
from infertune.models.variant import Manifest, PassRecord
from infertune.optimize.passes._onnx import ORT, OrtDerivedPass
from infertune.optimize.passes.base import PassContext, PassSettings, built
from infertune.optimize.passes.facts import PassFacts, Requires
from infertune.optimize.passes.registry import register

TEXT_ORT = Requires(libraries=ORT.libraries, model_kinds=("text",))


@dataclass(frozen=True)
class TrimSettings(PassSettings):
    """The percentile asked for, and what it gave on the held-out inputs (set at build)."""

    percentile: float
    round_up_to: int
    max_length: int | None = built()
    previous_max_length: int | None = built()
    truncated_share: float | None = built()
    heldout_inputs: int | None = built()
    length_quantile: float | None = built()


@dataclass(frozen=True)
class BucketSettings(PassSettings):
    padding: str
    buckets: list[int] | None = built()


@register("ort_trim_p99", facts=PassFacts(
    runtime="onnxruntime", precision="fp32", requires=TEXT_ORT,
    summary="inputs trimmed to the held-out set's p99 token length"))
class TrimPass(OrtDerivedPass):
    source = "ort_fused"

    def __init__(self, percentile: float = 99.0, multiple: int = 8) -> None:
        self.percentile = percentile
        self.multiple = multiple
        self.name = f"ort_trim_p{percentile:g}"

    def settings(self) -> TrimSettings:
        return TrimSettings(self.percentile, self.multiple)

    def applies(self, ctx: PassContext) -> str | None:
        if not isinstance(ctx.baseline, TextAdapter):
            return "trimming applies to text models only"
        if not ctx.calibration:
            return "trimming needs held-out inputs to measure token lengths; pass --data"
        return None

    def update(self, manifest: Manifest, ctx: PassContext, record: PassRecord) -> None:
        lengths = np.asarray(ctx.baseline.token_lengths(list(ctx.calibration)))  # type: ignore[attr-defined]
        current = manifest.preprocessing.max_length or int(lengths.max())
        quantile = float(np.percentile(lengths, self.percentile))
        chosen = min(current, self.multiple * math.ceil(quantile / self.multiple))
        if chosen >= current:
            raise NotApplicableError(
                f"p{self.percentile:g} of held-out token lengths is {quantile:.0f}, which rounds "
                f"to >= the current max_length {current}; trimming would change nothing")
        share = float((lengths > chosen).mean())
        manifest.preprocessing.max_length = chosen
        manifest.preprocessing.truncated_share = share
        record.settings |= replace(self.settings(), max_length=chosen,
                                   previous_max_length=current, truncated_share=share,
                                   heldout_inputs=int(len(lengths)),
                                   length_quantile=quantile).to_dict()
        manifest.notes.append(f"max_length {current} -> {chosen}: {share:.1%} of "
                              f"{len(lengths)} held-out inputs would be truncated")


@register("ort_bucketed", facts=PassFacts(
    runtime="onnxruntime", precision="fp32", requires=TEXT_ORT,
    summary="inputs padded to a few length buckets"))
class BucketPass(OrtDerivedPass):
    source = "ort_fused"
    name = "ort_bucketed"

    def settings(self) -> BucketSettings:
        return BucketSettings("bucket")

    def applies(self, ctx: PassContext) -> str | None:
        if not isinstance(ctx.baseline, TextAdapter):
            return "length bucketing applies to text models only"
        return None

    def update(self, manifest: Manifest, ctx: PassContext, record: PassRecord) -> None:
        pre = manifest.preprocessing
        limit = pre.max_length or max(pre.buckets)
        pre.buckets = sorted({b for b in pre.buckets if b < limit} | {limit})
        pre.padding = "bucket"
        record.settings |= replace(self.settings(), buckets=pre.buckets).to_dict()
