"""Export a Hugging Face encoder to ONNX with dynamic batch and sequence axes; a baseline that
is already an ONNX file is copied instead, and a torch tensor model (TorchScript, entry point)
is exported with a dynamic batch axis, so the onnxruntime passes build on any of them.

The export uses eager attention by default: with SDPA the exported graph hides attention in
ops that onnxruntime's transformer optimizer does not match, so it fuses no Attention node
(the ort_fused manifest records the counts either way).

It uses torch's TorchScript-based exporter (dynamo=False), deprecated since torch 2.9, on
purpose: on all-MiniLM-L6-v2 with torch 2.13 / onnxruntime 1.32 the torch.export-based
exporter took ~1 min and its graph fused no Attention and no EmbedLayerNormalization, while
this one fused 6 Attention + 1 EmbedLayerNormalization in ~1 s. The choice is recorded."""

from __future__ import annotations

import copy
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

from infertune.models.variant import PassRecord, ThreadSettings
from infertune.optimize.passes._onnx import MODEL_FILE, op_counts
from infertune.optimize.passes._priors import avx2_measured
from infertune.optimize.passes._tensor import (
    ExportSettings,
    export_tensor_module,
    onnx_file,
    tensor_manifest,
    torch_tensor_module,
)
from infertune.optimize.passes._text import hf_reason, require_hf, save_tokenizer, text_manifest
from infertune.optimize.passes.base import PassContext
from infertune.optimize.passes.facts import ExportCost, InPlan, PassFacts, Requires
from infertune.optimize.passes.registry import register
from infertune.optimize.passes.variant_files import Variant, finalize, fresh_dir

OPSET = 17


@register("ort_fp32", facts=PassFacts(
    runtime="onnxruntime", precision="fp32", requires=Requires(libraries=("onnx", "onnxruntime")),
    priors=avx2_measured(1.41, 1.0), cost=ExportCost(1.0),
    plans=(InPlan("text", "quick", 1), InPlan("tensor", "quick", 0)),
    summary="the ONNX export (or a copy of an .onnx baseline) on onnxruntime's CPU provider"))
class OnnxExportPass:
    name = "ort_fp32"
    source: str | None = None
    fallback_source: str | None = None
    precision = "fp32"

    def __init__(self, attn_implementation: str = "eager", opset: int = OPSET) -> None:
        self.attn_implementation = attn_implementation
        self.opset = opset

    def settings(self) -> ExportSettings:
        return ExportSettings(
            exporter="torch.onnx.export(dynamo=False), TorchScript-based (deprecated in "
                     "torch>=2.9; kept because its graphs fuse Attention)",
            opset=self.opset, attn_implementation=self.attn_implementation,
            dynamic_axes={"0": "batch", "1": "sequence"})

    def applies(self, ctx: PassContext) -> str | None:
        if onnx_file(ctx.baseline) is not None or torch_tensor_module(ctx.baseline) is not None:
            return None
        reason = hf_reason(ctx.baseline)
        return reason and f"{reason}, an .onnx file or a torch module"

    def apply(self, source: Variant | None, ctx: PassContext) -> Variant:
        original = onnx_file(ctx.baseline)
        if original is not None or torch_tensor_module(ctx.baseline) is not None:
            return self._tensor(original, ctx)
        folder = fresh_dir(ctx.out_dir, self.name)
        manifest = text_manifest(
            ctx, variant_id=self.name, runtime="onnxruntime", precision="fp32",
            model_file=MODEL_FILE, passes=[], tokenizer_dir=save_tokenizer(ctx.baseline, folder))
        started = time.perf_counter()
        export_text_model(ctx, folder / MODEL_FILE, manifest.output_name,
                          self.attn_implementation, self.opset)
        settings = replace(self.settings(), export_s=round(time.perf_counter() - started, 3))
        manifest.passes = [PassRecord(self.name, settings.to_dict())]
        manifest.threads = ThreadSettings(graph_level="all")
        manifest.op_counts = op_counts(folder / MODEL_FILE)
        return finalize(folder, manifest)

    def _tensor(self, original: Any, ctx: PassContext) -> Variant:
        """An .onnx baseline copied, or a torch tensor baseline exported."""
        import onnx

        folder = fresh_dir(ctx.out_dir, self.name)
        if original is not None:
            # load and save, not link: weights in external data files come along into one
            # file, and a later edit of the user's file cannot change the variant's bytes
            onnx.save(onnx.load(str(original)), str(folder / MODEL_FILE))
            settings = ExportSettings("none: the baseline is an ONNX file, copied as is",
                                      source_file=str(original))
        else:
            settings = export_tensor_module(ctx, folder / MODEL_FILE, self.opset)
        manifest = tensor_manifest(ctx, variant_id=self.name, model_path=folder / MODEL_FILE,
                                   passes=[PassRecord(self.name, settings.to_dict())])
        manifest.threads = ThreadSettings(graph_level="all")
        manifest.op_counts = op_counts(folder / MODEL_FILE)
        return finalize(folder, manifest)


def export_text_model(ctx: PassContext, path: Path, output_name: str,
                      attn_implementation: str, opset: int) -> None:
    import torch

    module, _ = require_hf(ctx.baseline)
    # a copy, so switching attention kernels never changes the baseline the others compare to
    module = copy.deepcopy(module).eval()
    module.set_attn_implementation(attn_implementation)
    names = list(ctx.baseline.info.input_names)
    feeds = ctx.baseline.preprocess(ctx.sample_inputs()[:2])
    args = tuple(torch.from_numpy(feeds[n]) for n in names)
    axes = {n: {0: "batch", 1: "sequence"} for n in [*names, output_name]}
    wrapper = _positional_wrapper(module, names, output_name)
    with warnings.catch_warnings():
        # the TorchScript exporter warns about tracing Python control flow it handles fine
        warnings.simplefilter("ignore")
        torch.onnx.export(wrapper, args, str(path),
                          input_names=names, output_names=[output_name], dynamic_axes=axes,
                          opset_version=opset, dynamo=False)


def _positional_wrapper(module: Any, names: list[str], output_name: str) -> Any:
    """Positional inputs in, one named output field out: what the ONNX graph exposes."""
    import torch

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.module = module

        def forward(self, *tensors: Any) -> Any:
            return getattr(self.module(**dict(zip(names, tensors, strict=True))), output_name)

    return Wrapper()
