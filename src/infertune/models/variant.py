"""A variant folder: model file(s) + ``manifest.json`` (schema "infertune.variant/v1").

The manifest is the whole recipe for running the variant without the run that made it::

    variants/<id>/
      manifest.json     runtime, precision, passes, inputs, threads, preprocessing, hashes
      model.onnx        onnxruntime variants: the graph (fused / quantized as the passes say)
      model.xml/.bin    openvino variants: the IR; precision, threads, streams and static
                        shapes in the manifest's ``openvino`` (models/openvino_runner.py)
      hf/               torch variants: config.json + model.safetensors (no pickles); the
                        recipe (autocast, compile, int8) is re-applied at load
      tokenizer/        text models: the tokenizer, copied in so the folder is self-contained

``read_manifest`` verifies the SHA-256 of every listed file and of the manifest itself, so a
hand-edited or corrupt variant is refused with ModelLoadError. This module only reads variants
(models/ sits above optimize/); optimize/passes/variant_files.py writes them. torch,
transformers and torchao are imported only when a torch variant loads: serving an onnxruntime
variant must not pay seconds of import and hundreds of MB for them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from infertune.errors import DataError, ModelLoadError
from infertune.jsonfile import read_json
from infertune.models.adapter import Adapter, ModelInfo
from infertune.models.gpu import OrtGpuRunner, OrtGpuSettings
from infertune.models.openvino_runner import OpenVinoSettings, OvRunner, default_cache_dir
from infertune.models.runners import OrtRunner, TorchRunner, hf_call
from infertune.models.tensor import onnx_tensor_adapter
from infertune.models.text import TextAdapter, TextPreprocess
from infertune.serial import Serial

SCHEMA = "infertune.variant/v1"
MANIFEST = "manifest.json"
GraphLevel = Literal["disabled", "basic", "extended", "all"]


@dataclass
class PassRecord(Serial):
    """One pass as it ran. ``settings`` is the JSON its pass wrote; code reads it back as the
    pass's own class (optimize.passes.settings_of), or as one of the shared parts below."""

    name: str
    settings: dict[str, Any] = field(default_factory=dict)  # JSON values, as the pass ran


_OMIT = {"omit_none": True}


@dataclass(frozen=True, kw_only=True)
class Int8SchemeSettings(Serial):
    """The INT8 scheme every onnxruntime INT8 pass writes into its record (the pass classes
    inherit it); serve reads it to warn when this CPU would saturate it (Manifest.int8_scheme)."""

    activation_type: str | None = field(default=None, metadata=_OMIT)
    weight_type: str | None = field(default=None, metadata=_OMIT)
    reduce_range: bool | None = field(default=None, metadata=_OMIT)
    scheme_reason: str | None = field(default=None, metadata=_OMIT)


@dataclass
class InputSpec(Serial):
    name: str
    dtype: str
    dynamic_axes: dict[str, str] = field(default_factory=dict)  # axis index -> name


@dataclass
class ThreadSettings(Serial):
    """onnxruntime session settings; 0 threads means "let the runtime decide"."""

    intra_op: int = 0
    inter_op: int = 0
    spinning: bool = True
    graph_level: GraphLevel = "all"
    # onnxruntime graph transformers to skip at load, e.g. "SkipLayerNormFusion" when the
    # fusion pass measured the fused kernel slower than the ops it replaces
    disabled_optimizers: list[str] = field(default_factory=list)


@dataclass
class Preprocessing(Serial):
    tokenizer_dir: str | None = None  # relative to the variant folder
    max_length: int | None = None
    padding: Literal["longest", "max_length", "bucket"] = "longest"
    buckets: list[int] = field(default_factory=list)
    truncated_share: float | None = None  # share of held-out inputs longer than max_length
    truncation: Literal["only_second", "longest_first", "only_first"] = "only_second"  # pairs


@dataclass(frozen=True)
class TorchRecipe(Serial):
    """How a torch variant is rebuilt from hf/ at load: all steps are code, not pickles.
    Frozen: the torch passes' settings (optimize/passes/_torch.py) extend it."""

    dtype: Literal["fp32", "bf16", "fp16"] = "fp32"
    mode: Literal["eager", "autocast", "cast"] = "eager"
    device: str = "cpu"
    compile: bool = False
    compile_mode: str = "default"
    compile_dynamic: bool = True
    compile_backend: str = "inductor"
    int8_dynamic: bool = False  # torchao Int8DynamicActivationInt8Weight on every Linear
    attn_implementation: str | None = None


@dataclass
class Agreement(Serial):
    """Numeric agreement of this variant's final outputs with the baseline's, per input row."""

    n_samples: int
    max_abs_diff: float
    mean_cosine: float
    min_cosine: float
    output_shape: list[int]


@dataclass
class Fp32Layer(Serial):
    name: str
    reason: str


@dataclass
class Manifest(Serial):
    id: str
    runtime: Literal["torch", "onnxruntime", "openvino"]
    precision: str
    kind: Literal["text", "tensor"]
    task: str
    model_file: str  # relative: "model.onnx" or "hf"
    passes: list[PassRecord] = field(default_factory=list)
    inputs: list[InputSpec] = field(default_factory=list)
    output_name: str = ""
    threads: ThreadSettings = field(default_factory=ThreadSettings)
    preprocessing: Preprocessing = field(default_factory=Preprocessing)
    recipe: TorchRecipe | None = None
    openvino: OpenVinoSettings | None = None  # openvino variants: how the CPU plugin runs it
    gpu: OrtGpuSettings | None = None  # onnxruntime on CUDA/TensorRT (models/gpu.py)
    source: dict[str, str] = field(default_factory=dict)  # ref, model id, sha256
    max_position: int | None = None
    libraries: dict[str, str] = field(default_factory=dict)
    op_counts: dict[str, int] = field(default_factory=dict)  # fused/quantized ops in the file
    agreement: Agreement | None = None
    first_call_s: float | None = None  # load-to-first-output on one input, measured at build
    fp32_layers: list[Fp32Layer] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # relative path -> sha256
    schema: str = SCHEMA

    def on_gpu(self) -> bool:
        """Whether this variant runs on an NVIDIA GPU (onnxruntime CUDA/TensorRT, torch cuda)."""
        return self.gpu is not None or (self.recipe is not None
                                        and self.recipe.device.startswith("cuda"))

    def int8_scheme(self) -> tuple[str, str, bool] | None:
        """(activation, weight, reduce_range) of the INT8 pass that built this variant."""
        for record in reversed(self.passes):
            scheme = Int8SchemeSettings.from_dict(record.settings)
            if scheme.weight_type is not None and scheme.reduce_range is not None:
                return (scheme.activation_type or "uint8", scheme.weight_type,
                        scheme.reduce_range)
        return None


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def manifest_digest(data: dict[str, Any]) -> str:
    """SHA-256 of the manifest's canonical JSON without its own digest field."""
    body = {k: v for k, v in data.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def read_manifest(folder: Path, *, verify: bool = True) -> Manifest:
    """Read and (by default) verify a variant folder; ModelLoadError names what is wrong."""
    path = Path(folder) / MANIFEST
    data = read_json(path, fix="rebuild the variant with `infertune optimize`",
                     error=ModelLoadError)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ModelLoadError(f"{path}: schema is not {SCHEMA!r}; rebuild the variant")
    if verify and data.get("manifest_sha256") != manifest_digest(data):
        raise ModelLoadError(f"{path} was edited after it was built (its hash does not match); "
                             "rebuild the variant instead of editing it")
    try:
        manifest = Manifest.from_dict(data)
    except (TypeError, KeyError, DataError) as exc:
        raise ModelLoadError(f"{path}: malformed manifest ({exc}); rebuild the variant") from exc
    if verify:
        verify_files(Path(folder), manifest)
    return manifest


def verify_files(folder: Path, manifest: Manifest) -> None:
    for rel, expected in sorted(manifest.files.items()):
        path = folder / rel
        if not path.is_file():
            raise ModelLoadError(f"variant {folder}: file {rel} is missing; rebuild the variant")
        if sha256_file(path) != expected:
            raise ModelLoadError(f"variant {folder}: {rel} does not match its SHA-256 in "
                                 "manifest.json (corrupt or modified); rebuild the variant")


def load_variant(path: str | Path) -> Adapter:
    """Load a variant folder as an Adapter after verifying every hash."""
    folder = Path(path)
    manifest = read_manifest(folder)
    if manifest.kind == "tensor":
        if manifest.runtime != "onnxruntime":
            raise ModelLoadError(f"variant {folder}: tensor-model variants run on onnxruntime; "
                                 f"this one names {manifest.runtime!r}; rebuild the variant")
        return _tensor_adapter(folder, manifest, _ort_runner(folder, manifest))
    runners = {"onnxruntime": _ort_runner, "openvino": _ov_runner, "torch": _torch_runner}
    return _text_adapter(folder, manifest, runners[manifest.runtime](folder, manifest))


def _ort_runner(folder: Path, manifest: Manifest) -> Any:
    t = manifest.threads
    if manifest.gpu is not None:  # ModelLoadError names a missing or failed GPU provider
        return OrtGpuRunner.open_gpu(
            str(folder / manifest.model_file), manifest.gpu, precision=manifest.precision,
            intra_op_threads=t.intra_op, inter_op_threads=t.inter_op,
            graph_level=t.graph_level, disabled_optimizers=list(t.disabled_optimizers))
    try:
        return OrtRunner.open(str(folder / manifest.model_file), precision=manifest.precision,
                              intra_op_threads=t.intra_op, inter_op_threads=t.inter_op,
                              graph_level=t.graph_level, allow_spinning=t.spinning,
                              disabled_optimizers=list(t.disabled_optimizers))
    except Exception as exc:  # onnxruntime raises untyped errors for graphs it cannot load
        raise ModelLoadError(f"variant {folder}: onnxruntime cannot load "
                             f"{manifest.model_file} ({type(exc).__name__})") from exc


def _ov_runner(folder: Path, manifest: Manifest) -> Any:
    settings = manifest.openvino or OpenVinoSettings()
    cache = default_cache_dir() if settings.cache else None
    try:
        return OvRunner(str(folder / manifest.model_file), settings,
                        cache_dir=str(cache) if cache else None)
    except ImportError as exc:
        raise ModelLoadError(f"variant {folder} runs on OpenVINO, which is not installed; "
                             "pip install 'infertune[openvino]'") from exc
    except Exception as exc:  # openvino raises untyped RuntimeErrors for models it cannot read
        first = str(exc).strip().split("\n")[0][:200]
        raise ModelLoadError(f"variant {folder}: OpenVINO cannot load {manifest.model_file} "
                             f"({type(exc).__name__}: {first}); rebuild the variant") from exc


def _torch_runner(folder: Path, manifest: Manifest) -> Any:
    import torch
    import transformers

    recipe = manifest.recipe or TorchRecipe()
    if recipe.device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"variant {folder} runs on a CUDA GPU, which torch cannot see here "
                             "(a CPU-only torch build, or no NVIDIA driver); serve it on a GPU "
                             "machine with a CUDA build of torch, or pick a CPU variant")
    auto = (transformers.AutoModel if manifest.task == "embedding"
            else transformers.AutoModelForSequenceClassification)
    kwargs: dict[str, Any] = {"local_files_only": True}
    if recipe.attn_implementation:
        kwargs["attn_implementation"] = recipe.attn_implementation
    try:
        module = auto.from_pretrained(str(folder / manifest.model_file), **kwargs).eval()
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"variant {folder}: cannot load {manifest.model_file} "
                             f"({exc})".split("\n")[0]) from exc
    autocast = None
    if recipe.mode == "cast":
        module = module.to(device=recipe.device, dtype=_TORCH_DTYPES[recipe.dtype](torch))
    elif recipe.mode == "autocast":
        autocast = _TORCH_DTYPES[recipe.dtype](torch)
        module = module.to(recipe.device)
    if recipe.int8_dynamic:
        module = _torchao_int8(module, folder)
    if recipe.compile:
        module = torch.compile(module, backend=recipe.compile_backend,
                               mode=recipe.compile_mode if recipe.compile_backend == "inductor"
                               else None, dynamic=recipe.compile_dynamic)
    field_name = "last_hidden_state" if manifest.task == "embedding" else "logits"
    return TorchRunner(module, [i.name for i in manifest.inputs], call=hf_call(field_name),
                       precision=manifest.precision, autocast=autocast, device=recipe.device)


_TORCH_DTYPES = {"fp32": lambda t: t.float32, "bf16": lambda t: t.bfloat16,
                 "fp16": lambda t: t.float16}


def _torchao_int8(module: Any, folder: Path) -> Any:
    try:
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
    except ImportError as exc:
        raise ModelLoadError(f"variant {folder} needs torchao for dynamic INT8; "
                             "pip install torchao") from exc
    quantize_(module, Int8DynamicActivationInt8WeightConfig())
    return module


def _text_adapter(folder: Path, manifest: Manifest, runner: Any) -> TextAdapter:
    import transformers

    pre = manifest.preprocessing
    if pre.tokenizer_dir is None or pre.max_length is None:
        raise ModelLoadError(f"variant {folder}: a text variant needs preprocessing."
                             "tokenizer_dir and max_length; rebuild the variant")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            str(folder / pre.tokenizer_dir), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"variant {folder}: cannot load its tokenizer ({exc})"
                             .split("\n")[0]) from exc
    buckets = tuple(pre.buckets) or TextPreprocess().buckets
    info = ModelInfo(
        id=manifest.id, version=manifest.files.get(manifest.model_file, _tree_hash(manifest))[:12],
        kind="text", task=manifest.task, runtime=manifest.runtime, precision=runner.precision,
        input_names=[i.name for i in manifest.inputs], source=str(folder),
        max_length=pre.max_length, max_position=manifest.max_position,
        tokenizer_dir=str(folder / pre.tokenizer_dir),
    )
    return TextAdapter(info, runner, tokenizer,
                       TextPreprocess(max_length=pre.max_length, padding=pre.padding,
                                      buckets=buckets, truncation=pre.truncation))


def _tensor_adapter(folder: Path, manifest: Manifest, runner: Any) -> Adapter:
    info = ModelInfo(
        id=manifest.id, version=manifest.files.get(manifest.model_file, _tree_hash(manifest))[:12],
        kind="tensor", task=manifest.task, runtime="onnxruntime", precision=manifest.precision,
        input_names=list(runner.input_names), source=str(folder))
    return onnx_tensor_adapter(info, runner)


def _tree_hash(manifest: Manifest) -> str:
    """Version of a multi-file model (hf/): a hash over its files' hashes."""
    prefix = manifest.model_file.rstrip("/") + "/"
    parts = [f"{k}={v}" for k, v in sorted(manifest.files.items()) if k.startswith(prefix)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()
