"""OpenVINO on the CPU: the settings a variant's manifest carries and the runner that applies
them. ``openvino`` (the openvino extra) is imported only when a runner opens.

The precision is always set explicitly (``INFERENCE_PRECISION_HINT``) and read back from the
compiled model: on a CPU with AMX, OpenVINO runs an f32 model in bf16 unless told otherwise, so
the hint the manifest asked for and the precision the kernels ran in can differ. The runner's
``precision`` is what the compiled model reports, per its matrix-multiply layers.

Static shapes: the sequence axis can be compiled at a few fixed lengths (``static_lengths``,
the batch axis stays dynamic); a batch is padded up to the next length with masked tokens and
the output cut back to the batch's own length, so callers see what dynamic shapes give.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from infertune.hardware import cgroup_cpu_quota, effective_cores
from infertune.models.adapter import ModelInputs, Runtime

PrecisionHint = Literal["f32", "bf16"]
# OpenVINO's element type names -> the precision names infertune reports
OV_PRECISIONS = {"f32": "fp32", "bf16": "bf16", "f16": "fp16", "u8": "int8", "i8": "int8"}
# runtime layers whose precision is the precision the model computes in (the rest are
# reshapes, gathers and element-wise ops, which stay f32 or i32 in every mode)
COMPUTE_LAYERS = ("FullyConnected", "MatMul", "Convolution")


@dataclass
class OpenVinoSettings:
    """What a variant asks of OpenVINO's CPU plugin (the manifest's ``openvino`` field)."""

    precision_hint: PrecisionHint = "f32"
    num_threads: int = 0  # INFERENCE_NUM_THREADS across all streams; 0: the cores we may use
    num_streams: int = 1  # NUM_STREAMS: requests computed at once, each on its share of threads
    # sequence lengths compiled as static shapes (batch stays dynamic); empty: dynamic shapes
    static_lengths: list[int] = field(default_factory=list)
    cache: bool = True  # compiled blobs kept in a CACHE_DIR, so a restart skips compilation
    output_sequence_axis: bool = True  # output axis 1 is the token axis (cut back after padding)

    def config(self, threads: int) -> dict[str, str]:
        """The compile_model properties; ``threads`` resolves num_threads == 0."""
        return {"INFERENCE_PRECISION_HINT": self.precision_hint,
                "NUM_STREAMS": str(self.num_streams),
                "INFERENCE_NUM_THREADS": str(self.num_threads or threads)}


def default_cache_dir() -> Path:
    """One folder per user for every variant: OpenVINO keys each blob by the model's hash and
    the compile settings, and the variant folder itself stays read-only (hashed, released)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "infertune" / "openvino"


def usable_cores() -> int:
    """Cores worth one thread each for this process (the cgroup quota counted): OpenVINO's
    own default is every core it sees, which oversubscribes a container's quota."""
    logical = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)
    cgroups = Path("/proc/self/cgroup")
    self_cgroup = cgroups.read_text() if cgroups.is_file() else ""
    return effective_cores(logical, cgroup_cpu_quota(Path("/sys/fs/cgroup"), self_cgroup))


def compute_precisions(compiled: Any) -> dict[str, int]:
    """Runtime precision -> how many compute layers (matrix multiplies) run in it, read from
    the compiled model's execution graph."""
    found: Counter[str] = Counter()
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        if "layerType" in info and info["layerType"].astype(str) in COMPUTE_LAYERS:
            found[info["runtimePrecision"].astype(str)] += 1
    return dict(sorted(found.items()))


def ran_precision(precisions: dict[str, int], hint: str) -> str:
    """The precision a model ran in: int8 when any matrix multiply runs on 8-bit integers
    (the rest then run in the hint's precision), else the most common one."""
    if any(OV_PRECISIONS.get(p) == "int8" for p in precisions):
        return "int8"
    if not precisions:
        return OV_PRECISIONS.get(hint, hint)
    top = max(precisions.items(), key=lambda kv: kv[1])[0]
    return OV_PRECISIONS.get(top, top)


@dataclass
class OpenedModel:
    compiled: Any
    compile_s: float


class OvRunner:
    """Runs a model.xml on OpenVINO's CPU plugin; safe to call from several threads (each
    thread gets its own infer request; requests beyond ``num_streams`` wait their turn)."""

    runtime: Runtime = "openvino"

    def __init__(self, path: str, settings: OpenVinoSettings, cache_dir: str | None = None,
                 threads: int = 0) -> None:
        import openvino as ov

        self.path = path
        self.settings = settings
        self.cache_dir = cache_dir
        self.threads = settings.num_threads or threads or usable_cores()
        # serve/worker_threads.py reads and resizes these (threads per stream, as for onnxruntime)
        per_stream = settings.num_threads // settings.num_streams if settings.num_threads else 0
        self.opened_with: dict[str, Any] = {"intra_op_threads": per_stream,
                                            "streams": settings.num_streams}
        self._core = ov.Core()
        if cache_dir and settings.cache:
            Path(cache_dir).mkdir(parents=True, exist_ok=True)
            self._core.set_property({"CACHE_DIR": cache_dir})
        self._local = threading.local()
        self._lock = threading.Lock()
        self._models: dict[int | None, OpenedModel] = {}
        for length in settings.static_lengths:
            self._models[length] = self._compile(length)
        if not settings.static_lengths:
            self._models[None] = self._compile(None)
        first = next(iter(self._models.values())).compiled
        self.input_names = [i.get_any_name() for i in first.inputs]
        self._dtypes = {i.get_any_name(): i.get_element_type().to_dtype() for i in first.inputs}
        self.precisions = compute_precisions(first)
        hint = first.get_property("INFERENCE_PRECISION_HINT")  # an ov.Type: "f32", "bf16"
        self.precision_property = str(getattr(hint, "get_type_name", lambda: hint)())
        self.precision = ran_precision(self.precisions, settings.precision_hint)

    @property
    def compile_s(self) -> float:
        """Seconds spent compiling at open (from the cache when it held the blobs)."""
        return sum(m.compile_s for m in self._models.values())

    def _compile(self, length: int | None) -> OpenedModel:
        started = time.perf_counter()
        model = self._core.read_model(self.path)
        if length is not None:
            model.reshape({i.get_any_name(): [-1, length] for i in model.inputs})
        if self.settings.precision_hint != "f32":
            clamp_overflowing_constants(model)
        compiled = self._core.compile_model(model, "CPU", self.settings.config(self.threads))
        return OpenedModel(compiled, time.perf_counter() - started)

    def reopen(self, **changes: Any) -> OvRunner:
        """The same model with serve's sizing: ``intra_op_threads`` per worker and ``streams``
        (one per worker sharing this runner). Other keys (onnxruntime's allow_spinning) have
        no OpenVINO counterpart and are ignored."""
        streams = int(changes.get("streams") or self.settings.num_streams)
        per = int(changes.get("intra_op_threads") or 0)
        threads = per * streams if per else self.settings.num_threads
        settings = replace(self.settings, num_streams=streams, num_threads=threads)
        return OvRunner(self.path, settings, self.cache_dir, self.threads)

    def __call__(self, feeds: ModelInputs) -> np.ndarray:
        cast = {n: np.ascontiguousarray(feeds[n], dtype=self._dtypes[n])
                for n in self.input_names}
        width = next(iter(cast.values())).shape[1] if cast and \
            next(iter(cast.values())).ndim >= 2 else None
        length = self._length_for(width)
        if length is not None and width is not None and length > width:
            cast = {n: _pad_axis1(a, length) for n, a in cast.items()}
        request = self._request(length)
        request.infer(cast)
        out = np.array(request.get_output_tensor(0).data, copy=True)
        if length is not None and width is not None and length > width \
                and self.settings.output_sequence_axis:
            out = out[:, :width]
        return out

    def _length_for(self, width: int | None) -> int | None:
        """The static length a batch of this width runs at; None: the dynamic model (compiled
        on first need when the static lengths do not reach this width)."""
        if not self.settings.static_lengths or width is None:
            return None
        fitting = [n for n in self.settings.static_lengths if n >= width]
        if fitting:
            return min(fitting)
        with self._lock:
            if None not in self._models:
                self._models[None] = self._compile(None)
        return None

    def _request(self, length: int | None) -> Any:
        requests = getattr(self._local, "requests", None)
        if requests is None:
            requests = self._local.requests = {}
        if length not in requests:
            requests[length] = self._models[length].compiled.create_infer_request()
        return requests[length]


def _pad_axis1(array: np.ndarray, length: int) -> np.ndarray:
    """Zeros appended on the token axis: pad token 0, attention mask 0 (ignored by attention),
    token type 0."""
    padded = np.zeros((array.shape[0], length, *array.shape[2:]), dtype=array.dtype)
    padded[:, : array.shape[1]] = array
    return padded


def convert_onnx(src: Path, dst_xml: Path) -> None:
    """model.xml + model.bin from an ONNX file, weights kept in f32 (save_model's default
    compresses them to f16, which would change an f32 variant's numerics)."""
    import openvino as ov

    ov.save_model(ov.convert_model(str(src)), str(dst_xml), compress_to_fp16=False)


# The attention mask of an exported transformer adds (1 - mask) * finfo(float32).min to the
# scores. In bf16 that constant rounds to -inf (bf16's largest finite value is 3.3895e38), and
# 0 * -inf is NaN: every output of the model turns NaN (seen on an AMX Xeon for MiniLM, OpenVINO
# 2026.4). A constant this far out means "minus infinity, but finite"; -1e30 means the same to a
# softmax (exp underflows to exactly 0 either way) and stays finite in bf16 and f16 alike.
OVERFLOWING = 1e38
FINITE_STAND_IN = 1e30


def clamp_overflowing_constants(model: Any) -> int:
    """Replace every f32 constant of ``model`` (an ``openvino.Model``) beyond +-OVERFLOWING by
    +-FINITE_STAND_IN, in place, before it is compiled at a lower precision; returns how many
    constants changed."""
    import openvino as ov
    from openvino import opset13

    changed = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Constant" or op.get_element_type() != ov.Type.f32:
            continue
        values = op.get_data()
        if not values.size or not np.any(np.abs(values) >= OVERFLOWING):
            continue
        clamped = opset13.constant(np.where(np.abs(values) >= OVERFLOWING,
                                            np.sign(values) * FINITE_STAND_IN,
                                            values).astype(np.float32))
        for target in op.output(0).get_target_inputs():
            target.replace_source_output(clamped.output(0))
        changed += 1
    return changed


def xml_files(folder: Path, model_file: str) -> Iterable[Path]:
    """The files a model.xml needs beside it (its weights)."""
    xml = folder / model_file
    return [xml, xml.with_suffix(".bin")]
