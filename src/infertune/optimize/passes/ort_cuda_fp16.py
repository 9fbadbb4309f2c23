"""onnxruntime on the CUDA provider in FP16, with IO binding.

The graph is fused for the GPU (onnxruntime's transformer optimizer with use_gpu: its CUDA
Attention kernel, fused LayerNorms and GELU) and converted to float16 with fp32 inputs and
outputs (keep_io_types), so callers feed and read what the fp32 graph takes and gives. The
fused LayerNorm kernels accumulate in fp32, which keeps the residual stream's normalisation
out of fp16's 11-bit mantissa; the build-time check and the quality gate judge the rest (the
graph also runs, slowly, on the CPU provider: tests/unit/optimize/test_passes_gpu.py).
Graphs the bert fusions do not cover (tensor models, other architectures) are converted as
they are."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infertune.models.gpu import GpuProvider
from infertune.models.variant import PassRecord
from infertune.optimize.passes._gpu import GPU_UNMEASURED, ORT_GPU, GpuPassSettings, OrtGpuPass
from infertune.optimize.passes.base import PassContext
from infertune.optimize.passes.facts import FUSE_RATIO, ExportCost, InPlan, PassFacts
from infertune.optimize.passes.ort_fusion import BERT_LIKE
from infertune.optimize.passes.registry import register
from infertune.serial import Serial


@dataclass(frozen=True)
class CudaFp16Settings(GpuPassSettings):
    provider: GpuProvider = "cuda"
    io_binding: bool = True
    keep_io_types: bool = True
    converter: str = "onnxruntime.transformers float16"


@dataclass(frozen=True)
class Fp16Graph(Serial):
    """What fp16_graph did: the GPU fusions (by operator), and the weights per element type."""

    gpu_fusion: dict[str, int]
    fused_for: str | None  # "bert", or None when no fusion pattern matched
    initializers: dict[str, int]


@register("ort_cuda_fp16", facts=PassFacts(
    runtime="onnxruntime", precision="fp16", device="gpu", requires=ORT_GPU,
    # the same optimizer call as ort_fused (FUSE_RATIO) plus the fp16 conversion (not timed)
    priors=GPU_UNMEASURED, cost=ExportCost(FUSE_RATIO, check=True),
    # the GPU's first candidate (kept on CPU machines out of the plan: builder.plan_passes)
    plans=(InPlan("text", "quick", 5), InPlan("tensor", "quick", 3)),
    summary="onnxruntime CUDA provider, graph fused for the GPU and in FP16, IO binding"))
class OrtCudaFp16Pass(OrtGpuPass):
    name = "ort_cuda_fp16"
    provider = "cuda"

    def settings(self) -> CudaFp16Settings:
        return CudaFp16Settings()

    def transform(self, src: Path, dst: Path, ctx: PassContext, record: PassRecord) -> None:
        config = getattr(getattr(ctx.baseline.runner, "module", None), "config", None)
        record.settings |= fp16_graph(src, dst, config).to_dict()


def fp16_graph(src: Path, dst: Path, hf_config: Any = None) -> Fp16Graph:
    """Write ``dst``: ``src`` fused for the GPU (BERT-like Hugging Face configs) and in fp16.
    Returns what was done, for the pass record."""
    from onnxruntime.transformers import optimizer

    model_type = getattr(hf_config, "model_type", None)
    if model_type in BERT_LIKE:
        model = optimizer.optimize_model(
            str(src), model_type="bert", num_heads=hf_config.num_attention_heads,
            hidden_size=hf_config.hidden_size, opt_level=0, use_gpu=True)
        fused = {k: v for k, v in model.get_fused_operator_statistics().items() if v}
    else:  # no fusion patterns for this graph: only the precision changes
        import onnx
        from onnxruntime.transformers.onnx_model import OnnxModel

        model = OnnxModel(onnx.load(str(src)))
        fused = {}
    model.convert_float_to_float16(keep_io_types=True)
    model.save_model_to_file(str(dst))
    return Fp16Graph(fused, "bert" if fused else None, initializer_types(dst))


def initializer_types(path: Path) -> dict[str, int]:
    """How many weight tensors the saved graph holds per element type ("float16": ...)."""
    import onnx

    graph = onnx.load(str(path)).graph
    names = Counter(onnx.helper.tensor_dtype_to_np_dtype(t.data_type).name
                    for t in graph.initializer)
    return dict(sorted(names.items()))
