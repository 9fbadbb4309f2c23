"""A Triton model repository for the plan's ONNX variant (or OpenVINO variant: its model step
is written by export/triton_openvino.py for Triton's OpenVINO backend).

    <out>/<id>_model/config.pbtxt, 1/model.onnx         the variant on Triton's onnxruntime
                                                        backend, batching as measured; a GPU
                                                        variant on KIND_GPU instances (its
                                                        TensorRT settings as an accelerator)
    text models also get (a client sends text, as to `infertune serve`):
    <out>/<id>_tokenize/config.pbtxt, 1/model.py        Python backend: the variant's tokenizer
    <out>/<id>_postprocess/config.pbtxt, 1/model.py     Python backend: pooling / softmax
    <out>/<id>/config.pbtxt, 1/                         the ensemble joining the three
    tensor models: <out>/<id>/ is the ONNX model itself.

Every config.pbtxt line that carries a number has a comment naming where it came from; tests
parse the files with Triton's own ModelConfig protobuf schema (tritonclient).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from infertune.errors import ConfigError
from infertune.export.deploy_plan import DeployPlan, Sourced
from infertune.export.triton_openvino import openvino_io, openvino_parameters, write_openvino_model
from infertune.jsonfile import write_json
from infertune.models.gpu import OrtGpuSettings

# Copied as model.py, never imported here: they import Triton's triton_python_backend_utils
PYTHON_MODELS = Path(__file__).parent / "triton_models"
TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")

# ONNX TensorProto element types -> Triton data types
ONNX_TO_TRITON = {1: "TYPE_FP32", 2: "TYPE_UINT8", 3: "TYPE_INT8", 4: "TYPE_UINT16",
                  5: "TYPE_INT16", 6: "TYPE_INT32", 7: "TYPE_INT64", 8: "TYPE_STRING",
                  9: "TYPE_BOOL", 10: "TYPE_FP16", 11: "TYPE_FP64", 12: "TYPE_UINT32",
                  13: "TYPE_UINT64", 16: "TYPE_BF16"}
# manifest graph_level -> the onnxruntime backend's optimization.graph.level ("all" is its
# default, so it is left out)
GRAPH_LEVELS = {"basic": -1, "extended": 1, "disabled": 2}
# where Triton's TensorRT accelerator keeps built engines inside the container
TRT_CACHE_PATH = "/tmp/infertune-tensorrt"

QUEUE_TIMEOUT_NOTE = (
    "Triton's queue timeout bounds only the time a request waits in this model's scheduler "
    "queue: a request still queued when it expires is rejected (REJECT), never answered late. "
    "It does not bound the end-to-end latency: network, the tokenizer step, the batch "
    "delay already spent and the model's own compute come on top, and a request that has "
    "started executing is not cut off. So the SLO holds only while the measured service time "
    "holds; the p99 alert watches the rest.")


@dataclass(frozen=True)
class Tensor:
    name: str
    data_type: str
    dims: list[int]  # without the batch axis; -1 = variable


def triton_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_") or "model"


def onnx_io(model_file: Path) -> tuple[list[Tensor], list[Tensor]]:
    """The ONNX graph's inputs and outputs with the batch axis removed (checked dynamic)."""
    # onnx is the onnx extra's, imported here so the CLI starts without it
    import onnx

    graph = onnx.load(str(model_file), load_external_data=False).graph
    initialisers = {i.name for i in graph.initializer}

    def tensors(values: list[onnx.ValueInfoProto]) -> list[Tensor]:
        found = []
        for v in values:
            if v.name in initialisers:
                continue
            t = v.type.tensor_type
            dims = [d.dim_value if d.dim_value > 0 else -1 for d in t.shape.dim]
            if not dims or dims[0] != -1:
                raise ConfigError(f"{model_file}: {v.name!r} has no dynamic batch axis; Triton's "
                                  "dynamic batching needs one (re-export the variant)")
            if t.elem_type not in ONNX_TO_TRITON:
                raise ConfigError(f"{model_file}: {v.name!r} has ONNX type {t.elem_type}, which "
                                  "Triton does not take")
            found.append(Tensor(v.name, ONNX_TO_TRITON[t.elem_type], dims[1:]))
        return found

    return tensors(list(graph.input)), tensors(list(graph.output))


def _c(source: str) -> str:
    return "  # " + " ".join(source.split())


def _num(field: str, value: Sourced[int], indent: str = "") -> str:
    return f"{indent}{field}: {value.value}{_c(value.source)}"


def _io(kind: str, tensors: list[Tensor], note: str) -> list[str]:
    rows = [f'  {{ name: "{t.name}" data_type: {t.data_type} dims: [ '
            f'{", ".join(str(d) for d in t.dims)} ] }}' for t in tensors]
    return [f"{kind} [  # {note}", ",\n".join(rows), "]"]


def onnx_config(p: DeployPlan, name: str, inputs: list[Tensor], outputs: list[Tensor]) -> str:
    m = p.source.manifest
    openvino = m.runtime == "openvino"
    backend = "openvino" if openvino else "onnxruntime"
    where = f"variants/{m.id}/{m.model_file}"
    lines = [f"# {m.id} from {p.source.label} on Triton's {backend} backend, batched by the "
             "run's serving policy.", f'name: "{name}"', f'backend: "{backend}"',
             _num("max_batch_size", p.max_batch_size)]
    if openvino:
        lines.append('default_model_filename: "model.xml"  # with model.bin beside it')
    lines += _io("input", inputs, f"the graph inputs of {where}")
    lines += _io("output", outputs, f"the graph outputs of {where}")
    lines += ["dynamic_batching {",
              f"  preferred_batch_size: [ {p.max_batch_size.value} ]{_c(p.max_batch_size.source)}"
              " -- the batch the policy fills",
              _num("max_queue_delay_microseconds", p.max_wait_us, "  ")]
    if p.queue_timeout_us is not None:
        lines += ["  default_queue_policy {"]
        lines += [f"    # {line}" for line in _wrap(QUEUE_TIMEOUT_NOTE)]
        lines += ["    timeout_action: REJECT",
                  _num("default_timeout_microseconds", p.queue_timeout_us, "    "),
                  "    allow_timeout_override: true  # a client may ask for less, never more",
                  _num("max_queue_size", p.max_queue, "    "), "  }"]
    kind, per = ("KIND_GPU", " on each visible GPU") if m.gpu is not None else ("KIND_CPU", "")
    lines += ["}", "instance_group [",
              f"  {{ kind: {kind} count: {p.workers.value} }}{_c(p.workers.source)}"
              f" -- one model instance per serving worker{per}", "]"]
    if openvino:
        return "\n".join(lines + openvino_parameters(p)) + "\n"
    lines += [f'parameters {{ key: "intra_op_thread_count" value: {{ string_value: '
              f'"{p.intra_op_threads.value}" }} }}{_c(p.intra_op_threads.source)}',
              f'parameters {{ key: "inter_op_thread_count" value: {{ string_value: '
              f'"{p.inter_op_threads.value}" }} }}{_c(p.inter_op_threads.source)}']
    lines += _optimization(p)
    if m.threads.disabled_optimizers:
        lines.append(f"# The variant turns off {m.threads.disabled_optimizers} at load (measured "
                     "slower on the run's machine); Triton's onnxruntime backend has no setting "
                     "for that, so time it on the target machine.")
    return "\n".join(lines) + "\n"


def _optimization(p: DeployPlan) -> list[str]:
    """The one ``optimization`` block (protobuf text refuses a second): the graph level, and
    for a TensorRT variant the backend's TensorRT accelerator with the variant's settings."""
    m = p.source.manifest
    body: list[str] = []
    level = m.threads.graph_level
    if level in GRAPH_LEVELS:
        body.append(f"  graph {{ level: {GRAPH_LEVELS[level]} }}  # manifest "
                    f"threads.graph_level = {level}")
    if m.gpu is not None and m.gpu.provider == "tensorrt":
        body += _tensorrt_accelerator(p, m.gpu)
    return ["optimization {", *body, "}"] if body else []


def _tensorrt_accelerator(p: DeployPlan, gpu: OrtGpuSettings) -> list[str]:
    params = [("precision_mode", "FP16" if gpu.fp16 else "FP32",
               "manifest gpu.fp16 (TensorRT picks FP16 kernels)")]
    if gpu.fp16:
        params.append(("trt_layer_norm_fp32_fallback", "1",
                       "as models/gpu.py opens it: a decomposed LayerNorm stays fp32"))
    if gpu.engine_cache:
        params += [("trt_engine_cache_enable", "1", "manifest gpu.engine_cache"),
                   ("trt_engine_cache_path", TRT_CACHE_PATH,
                    "must be writable; a persistent volume keeps restarts from rebuilding")]
    if gpu.profile is not None:
        # Triton may form batches up to max_batch_size: the profile must admit them
        batch = max(gpu.profile.max_batch, p.max_batch_size.value)
        widened = dataclasses.replace(gpu.profile, max_shapes={
            name: [batch, *dims[1:]] for name, dims in gpu.profile.max_shapes.items()})
        source = "manifest gpu.profile (opt from the traffic's token lengths)"
        params += [(key, value, source) for key, value in widened.provider_options().items()]
    rows = [f'      parameters {{ key: "{key}" value: "{value}" }}  # {why}'
            for key, value, why in params]
    return ["  execution_accelerators { gpu_execution_accelerator: [ {",
            '      name: "tensorrt"', *rows, "  } ] }"]


def _wrap(text: str, width: int = 92) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return lines + ([line] if line else [])


def _python_config(name: str, p: DeployPlan, inputs: list[Tensor], outputs: list[Tensor],
                   what: str) -> str:
    lines = [f"# {what}", f'name: "{name}"', 'backend: "python"',
             _num("max_batch_size", p.max_batch_size)]
    lines += _io("input", inputs, "see model.py")
    lines += _io("output", outputs, "see model.py")
    lines += ["instance_group [",
              f"  {{ kind: KIND_CPU count: {p.workers.value} }}{_c(p.workers.source)}", "]"]
    return "\n".join(lines) + "\n"


def _ensemble_config(name: str, p: DeployPlan, steps: list[tuple[str, dict[str, str],
                                                                  dict[str, str]]]) -> str:
    pairs = "TEXT_PAIR" in steps[0][1]
    text_in = 'input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] }' + (
        ', { name: "TEXT_PAIR" data_type: TYPE_STRING dims: [ 1 ] } ]' if pairs else " ]")
    lines = ["# What a client calls: TEXT in (as to infertune serve), OUTPUT out. Triton batches",
             "# the ONNX step only across requests of one padded length (padding: "
             f"{p.source.manifest.preprocessing.padding}, from the manifest).",
             *(["# A cross-encoder: TEXT holds the queries, TEXT_PAIR their passages, one each."]
               if pairs else []),
             f'name: "{name}"', 'platform: "ensemble"', _num("max_batch_size", p.max_batch_size),
             text_in,
             'output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] } ]',
             "ensemble_scheduling {", "  step ["]
    blocks = []
    for model, inputs, outputs in steps:
        maps = [f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items()]
        maps += [f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items()]
        blocks.append(f'    {{ model_name: "{model}" model_version: -1 ' + " ".join(maps) + " }")
    lines += [",\n".join(blocks), "  ]", "}"]
    return "\n".join(lines) + "\n"


def write_triton(p: DeployPlan, out: Path) -> list[Path]:
    """Write the repository under ``out``; returns the config.pbtxt files written."""
    m = p.source.manifest
    if m.runtime == "openvino" and m.kind == "text":
        ins, outs = openvino_io(p.source.variant_dir / m.model_file)
        return _write_text(p, out, triton_name(m.id), [Tensor(*t) for t in ins],
                           [Tensor(*t) for t in outs])
    if m.runtime != "onnxruntime" or not m.model_file.endswith(".onnx"):
        folders = p.source.variant_dir.parent
        onnx_ids = sorted(f.name for f in folders.iterdir() if (f / "model.onnx").is_file()) \
            if p.source.kind == "run" else []
        fix = (f"pass --variant with one of {onnx_ids}" if onnx_ids else
               "this run built none; re-run infertune optimize with a larger --budget")
        raise ConfigError(f"variant {m.id!r} runs on {m.runtime}; the Triton export takes an "
                          f"onnxruntime variant (model.onnx): {fix}")
    inputs, outputs = onnx_io(p.source.variant_dir / m.model_file)
    base = triton_name(m.id)
    if m.kind == "tensor":
        return [_write_onnx(p, out / base, base, inputs, outputs)]
    return _write_text(p, out, base, inputs, outputs)


def _write_onnx(p: DeployPlan, folder: Path, name: str, inputs: list[Tensor],
                outputs: list[Tensor]) -> Path:
    if p.source.manifest.runtime == "openvino":
        return write_openvino_model(p, folder, onnx_config(p, name, inputs, outputs))
    (folder / "1").mkdir(parents=True, exist_ok=True)
    src = p.source.variant_dir / p.source.manifest.model_file
    shutil.copy2(src, folder / "1" / "model.onnx")
    data = src.parent / f"{src.name}.data"  # external weights travel with the graph
    if data.is_file():
        shutil.copy2(data, folder / "1" / data.name)
    config = folder / "config.pbtxt"
    config.write_text(onnx_config(p, name, inputs, outputs))
    return config


def _write_text(p: DeployPlan, out: Path, base: str, inputs: list[Tensor],
                outputs: list[Tensor]) -> list[Path]:
    m = p.source.manifest
    pre = m.preprocessing
    if pre.tokenizer_dir is None or pre.max_length is None:
        raise ConfigError(f"variant {m.id!r} has no tokenizer_dir/max_length in its manifest; "
                          "rebuild it with infertune optimize")
    names = {t.name for t in inputs}
    if not names <= set(TOKEN_INPUTS):
        raise ConfigError(f"variant {m.id!r} takes {sorted(names)}; the tokenizer step feeds "
                          f"only {list(TOKEN_INPUTS)}")
    model, tok, post = f"{base}_model", f"{base}_tokenize", f"{base}_postprocess"
    pairs = m.task == "reranking"
    written = [_write_onnx(p, out / model, model, inputs, outputs)]
    # the tokenizer step: model.py, the variant's tokenizer folder and its settings
    version = out / tok / "1"
    version.mkdir(parents=True, exist_ok=True)
    shutil.copy2(PYTHON_MODELS / "tokenize.py", version / "model.py")
    shutil.copytree(p.source.variant_dir / pre.tokenizer_dir, version / "tokenizer",
                    dirs_exist_ok=True)
    write_json(version / "preprocessing.json", {
        "_source": f"variants/{m.id}/manifest.json preprocessing and inputs",
        "tokenizer_dir": "tokenizer", "max_length": pre.max_length, "padding": pre.padding,
        "buckets": list(pre.buckets) or [16, 32, 64, 128, 256, 512],
        "token_type_ids": "token_type_ids" in names, "pairs": pairs,
        "truncation": pre.truncation})
    token_outputs = [t for t in inputs if t.name in TOKEN_INPUTS]
    # a cross-encoder reads (query, passage) pairs: the passages come in their own tensor
    text_in = [Tensor("TEXT", "TYPE_STRING", [1])] + (
        [Tensor("TEXT_PAIR", "TYPE_STRING", [1])] if pairs else [])
    (out / tok / "config.pbtxt").write_text(_python_config(
        tok, p, text_in, token_outputs, f"the tokenizer of {m.id} (Python backend)"))
    # the postprocessing step
    version = out / post / "1"
    version.mkdir(parents=True, exist_ok=True)
    shutil.copy2(PYTHON_MODELS / "postprocess.py", version / "model.py")
    write_json(version / "postprocess.json",
               {"_source": f"variants/{m.id}/manifest.json task", "task": m.task})
    raw = next((t for t in outputs if t.name == m.output_name), outputs[0])
    (out / post / "config.pbtxt").write_text(_python_config(
        post, p, [Tensor("OUTPUT_RAW", raw.data_type, raw.dims),
                  Tensor("attention_mask", "TYPE_INT64", [-1])],
        [Tensor("OUTPUT", "TYPE_FP32", [-1])], f"the {m.task} postprocessing of {m.id}"))
    # the ensemble a client calls
    (out / base / "1").mkdir(parents=True, exist_ok=True)
    token_map = {t.name: t.name for t in token_outputs}
    text_map = {"TEXT": "TEXT", **({"TEXT_PAIR": "TEXT_PAIR"} if pairs else {})}
    steps = [(tok, text_map, token_map),
             (model, token_map, {raw.name: "raw_output"}),
             (post, {"OUTPUT_RAW": "raw_output", "attention_mask": "attention_mask"},
              {"OUTPUT": "OUTPUT"})]
    (out / base / "config.pbtxt").write_text(_ensemble_config(base, p, steps))
    return written + [out / tok / "config.pbtxt", out / post / "config.pbtxt",
                      out / base / "config.pbtxt"]
