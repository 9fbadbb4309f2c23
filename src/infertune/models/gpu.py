"""ONNX Runtime on an NVIDIA GPU: the CUDA and TensorRT execution providers, the settings a
variant's manifest carries for them (``Manifest.gpu``), and the runner that applies them.

Which provider runs is decided here and checked after the session opens: onnxruntime lists
a provider as available whenever its build has it (onnxruntime-gpu lists TensorRT even where
the TensorRT libraries are absent) and, when a provider fails to initialise, quietly runs the
graph on the CPU instead. So ``OrtGpuRunner.open`` reads ``session.get_providers()`` back and
refuses a session whose first provider is not the one the variant names: a GPU variant that
silently ran on the CPU would be measured and served at a latency nobody chose.

TensorRT builds an engine per shape profile on first load (minutes for a transformer), so the
profile's min/opt/max shapes are fixed at build time from the traffic's token lengths
(``trt_profile``) and the engines are cached in a folder outside the (hashed, read-only)
variant folder. TensorRT raises on a shape outside the profile, so min and max cover every
shape the preprocessing can produce; the runner splits batches larger than the profile's.

Nothing here imports a GPU-only library at module import; onnxruntime is imported when a
session opens, as in runners.py.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from infertune.errors import ModelLoadError
from infertune.hardware import GpuInfo, HardwareInfo
from infertune.models.adapter import ModelInputs
from infertune.models.runners import OrtRunner, ort_session
from infertune.serial import Serial

GpuProvider = Literal["cuda", "tensorrt"]
PROVIDER_NAMES: dict[str, str] = {"cuda": "CUDAExecutionProvider",
                                  "tensorrt": "TensorrtExecutionProvider"}
CPU_PROVIDER = "CPUExecutionProvider"
# FP16 tensor cores arrived with Volta (compute capability 7.0); before it FP16 runs on the
# plain CUDA cores at (at best) twice the fp32 rate, and on Pascal consumer parts far slower.
FP16_TENSOR_CORES = 7.0
GPU_EXTRA_HINT = ("pip install -c constraints.txt 'infertune[gpu]' (onnxruntime-gpu, in place "
                  "of the onnx extra's onnxruntime) on a machine with an NVIDIA driver")


@dataclass
class TrtProfile(Serial):
    """One TensorRT optimization profile: shapes per input name, batch axis first."""

    min_shapes: dict[str, list[int]]
    opt_shapes: dict[str, list[int]]
    max_shapes: dict[str, list[int]]
    # where opt came from: the traffic's token lengths it was read from (n, p50, p95, max)
    traffic: dict[str, float] = field(default_factory=dict)

    @property
    def max_batch(self) -> int:
        return min(shape[0] for shape in self.max_shapes.values())

    def provider_options(self) -> dict[str, str]:
        """The trt_profile_* options, in the "name:1x16,other:1x16" form onnxruntime reads."""
        def spell(shapes: dict[str, list[int]]) -> str:
            return ",".join(f"{name}:{'x'.join(str(d) for d in dims)}"
                            for name, dims in shapes.items())

        return {"trt_profile_min_shapes": spell(self.min_shapes),
                "trt_profile_opt_shapes": spell(self.opt_shapes),
                "trt_profile_max_shapes": spell(self.max_shapes)}


@dataclass
class OrtGpuSettings(Serial):
    """How an onnxruntime variant runs on the GPU (the manifest's ``gpu`` field)."""

    provider: GpuProvider = "cuda"
    device_id: int = 0
    # IO binding: outputs are allocated on the device and copied back once per call, instead
    # of onnxruntime's per-run allocation and copy of every output through the host
    io_binding: bool = True
    fp16: bool = True  # tensorrt: trt_fp16_enable (the graph stays fp32; TensorRT picks fp16)
    engine_cache: bool = True  # tensorrt: engines kept in default_trt_cache_dir()
    profile: TrtProfile | None = None  # tensorrt: the one shape profile


def default_trt_cache_dir() -> Path:
    """One folder per user: onnxruntime names each engine by the model's hash and profile, and
    the variant folder stays read-only (hashed, released)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "infertune" / "tensorrt"


# ---------------------------------------------------------------------------- applicability


def capability(gpu: GpuInfo) -> float | None:
    try:
        return float(gpu.compute_capability) if gpu.compute_capability else None
    except ValueError:
        return None


def fp16_gpu_reason(hw: HardwareInfo) -> str | None:
    """None when the first GPU has FP16 tensor cores; else why an FP16 GPU variant is not
    built here."""
    if not hw.gpus:
        return "needs an NVIDIA GPU; this machine's hardware report lists none"
    gpu = hw.gpus[0]
    found = capability(gpu)
    if found is None:
        return (f"GPU {gpu.name}: the driver did not report its compute capability, so FP16 "
                f"tensor cores (compute {FP16_TENSOR_CORES:.1f}+) cannot be confirmed")
    if found < FP16_TENSOR_CORES:
        return (f"GPU {gpu.name} (compute {gpu.compute_capability}) has no FP16 tensor cores "
                f"(compute {FP16_TENSOR_CORES:.1f}+, Volta or later); FP16 would gain little")
    return None


def provider_reason(provider: GpuProvider, available: Sequence[str]) -> str | None:
    """None when this onnxruntime build has the provider; else why not and the fix."""
    wanted = PROVIDER_NAMES[provider]
    if wanted in available:
        return None
    return (f"this onnxruntime has no {wanted} (it has {', '.join(available) or 'none'}); "
            f"{GPU_EXTRA_HINT}")


def available_providers() -> list[str]:
    import onnxruntime as ort

    return list(ort.get_available_providers())


# ---------------------------------------------------------------------------- sessions


def session_providers(settings: OrtGpuSettings, cache_dir: Path | None = None
                      ) -> list[tuple[str, dict[str, str]]]:
    """(provider, options) in priority order. onnxruntime gives each node to the first
    provider that takes it, so TensorRT's unsupported nodes run on CUDA, not the CPU."""
    cuda = (PROVIDER_NAMES["cuda"], {"device_id": str(settings.device_id)})
    if settings.provider == "cuda":
        return [cuda, (CPU_PROVIDER, {})]
    trt: dict[str, str] = {"device_id": str(settings.device_id),
                           "trt_fp16_enable": str(settings.fp16)}
    if settings.fp16:
        # a LayerNorm exported as Pow + ReduceMean overflows in fp16 (the sum of squares of
        # activations in the hundreds): TensorRT keeps that pattern in fp32 when asked
        trt["trt_layer_norm_fp32_fallback"] = "True"
    if settings.engine_cache:
        folder = cache_dir or default_trt_cache_dir()
        trt |= {"trt_engine_cache_enable": "True", "trt_engine_cache_path": str(folder),
                "trt_timing_cache_enable": "True", "trt_timing_cache_path": str(folder)}
    if settings.profile is not None:
        trt |= settings.profile.provider_options()
    return [(PROVIDER_NAMES["tensorrt"], trt), cuda, (CPU_PROVIDER, {})]


def check_session_provider(session: Any, settings: OrtGpuSettings, path: str) -> None:
    """Refuse a session onnxruntime opened on another provider than the variant's."""
    wanted = PROVIDER_NAMES[settings.provider]
    got = list(session.get_providers())
    if not got or got[0] != wanted:
        raise ModelLoadError(
            f"{path}: onnxruntime opened this GPU variant on {', '.join(got) or 'nothing'}, "
            f"not {wanted} (its libraries failed to load: CUDA 12 and cuDNN 9 for CUDA, plus "
            "TensorRT for TensorRT); install them or serve a CPU variant")


SessionFactory = Callable[..., Any]


class OrtGpuRunner(OrtRunner):
    """An OrtRunner whose session runs on the CUDA or TensorRT provider.

    ``bind_device`` is where IO binding allocates outputs: "cuda" on a GPU; "cpu" only for a
    stand-in run on the CPU provider (tests, benchmarks/gpu_check.py --dry-run), which runs
    the same graph, feeds and binding code without a device."""

    def __init__(self, session: Any, settings: OrtGpuSettings, precision: str = "fp16",
                 opened_with: dict[str, Any] | None = None, bind_device: str = "cuda") -> None:
        super().__init__(session, precision=precision, opened_with=opened_with)
        self.settings = settings
        self.bind_device = bind_device
        self.max_batch = settings.profile.max_batch if settings.profile else None

    @classmethod
    def open_gpu(cls, path: str, settings: OrtGpuSettings, precision: str = "fp16",
                 available: Sequence[str] | None = None, stand_in_cpu: bool = False,
                 session_factory: SessionFactory = ort_session,
                 preload: Callable[[], None] | None = None, **session_args: Any
                 ) -> OrtGpuRunner:
        """A runner on a new session; ModelLoadError names a missing or failed provider.
        ``stand_in_cpu``: open on the CPU provider instead (no device is used). ``available``,
        ``session_factory`` and ``preload`` are onnxruntime's own unless injected (tests)."""
        args = {"path": path, **session_args}
        if stand_in_cpu:
            session = session_factory(**args, providers=[CPU_PROVIDER])
            return cls(session, settings, precision, {**args, "stand_in_cpu": True}, "cpu")
        found = available_providers() if available is None else list(available)
        reason = provider_reason(settings.provider, found)
        if reason is not None:
            raise ModelLoadError(f"{path}: {reason}")
        (preload or preload_cuda_libraries)()
        try:
            session = session_factory(**args, providers=session_providers(settings))
        except Exception as exc:  # onnxruntime raises untyped errors (a graph, a TRT build)
            first = str(exc).strip().split("\n")[0][:200]
            raise ModelLoadError(f"{path}: onnxruntime cannot open it on "
                                 f"{PROVIDER_NAMES[settings.provider]} ({type(exc).__name__}: "
                                 f"{first})") from exc
        check_session_provider(session, settings, path)
        return cls(session, settings, precision, args, "cuda")

    def reopen(self, **changes: Any) -> OrtGpuRunner:
        if self.opened_with is None:
            raise ValueError("this runner was built on a session it did not open")
        args = {**self.opened_with, **changes}
        stand_in = bool(args.pop("stand_in_cpu", False))
        return OrtGpuRunner.open_gpu(settings=self.settings, precision=self.precision,
                                     stand_in_cpu=stand_in, **args)

    def __call__(self, feeds: ModelInputs) -> np.ndarray:
        rows = len(next(iter(feeds.values())))
        step = self.max_batch or rows
        if rows <= step:
            return self._run(feeds)
        # TensorRT raises on a batch beyond its profile's max: run it in profile-sized chunks
        parts = [self._run({k: v[i:i + step] for k, v in feeds.items()})
                 for i in range(0, rows, step)]
        return np.concatenate(parts, axis=0)

    def _run(self, feeds: ModelInputs) -> np.ndarray:
        if not self.settings.io_binding:
            return super().__call__(feeds)
        binding = self.session.io_binding()
        for name in self.input_names:
            value = feeds[name]
            dtype = self._dtypes[name]
            binding.bind_cpu_input(name, np.ascontiguousarray(
                value.astype(dtype, copy=False) if dtype is not None else value))
        binding.bind_output(self._output, self.bind_device, self.settings.device_id)
        self.session.run_with_iobinding(binding)
        return np.asarray(binding.copy_outputs_to_cpu()[0])


def preload_cuda_libraries() -> None:
    """onnxruntime-gpu >= 1.19 can load CUDA and cuDNN from the nvidia-* pip packages (the ones
    torch's CUDA wheels bring). A library it cannot find is not an error here: the session's
    provider check below names the failure."""
    import onnxruntime as ort

    preload = getattr(ort, "preload_dlls", None)
    if preload is not None:
        try:
            preload()
        except OSError:
            pass


# ---------------------------------------------------------------------------- TensorRT shapes


def trt_profile(input_names: Sequence[str], lengths: Sequence[int], *, max_length: int,
                max_batch: int = 32, opt_batch: int = 16,
                padded_length: Callable[[int], int] | None = None) -> TrtProfile:
    """The shape profile for token inputs of shape (batch, sequence).

    min and max cover every shape the preprocessing can produce (one token to max_length, one
    row to max_batch): TensorRT raises on a shape outside its profile. opt is what TensorRT
    tunes its kernels for: a batch of ``opt_batch`` padded to its longest row, whose expected
    length is the traffic's n/(n+1) quantile (the expected largest of n draws), padded as the
    preprocessing pads (``padded_length``)."""
    if not lengths:
        raise ValueError("trt_profile needs the traffic's token lengths; got none")
    if not 1 <= opt_batch <= max_batch:
        raise ValueError(f"opt_batch must lie in [1, max_batch={max_batch}]; got {opt_batch}")
    ordered = sorted(min(n, max_length) for n in lengths)
    longest_of_batch = _quantile(ordered, opt_batch / (opt_batch + 1))
    opt_len = min(max_length, (padded_length or (lambda n: n))(longest_of_batch))
    return TrtProfile(
        min_shapes={name: [1, 1] for name in input_names},
        opt_shapes={name: [opt_batch, opt_len] for name in input_names},
        max_shapes={name: [max_batch, max_length] for name in input_names},
        traffic={"n": len(ordered), "p50": _quantile(ordered, 0.5),
                 "p95": _quantile(ordered, 0.95), "max": ordered[-1]})


def _quantile(ordered: Sequence[int], q: float) -> int:
    """The nearest-rank quantile (a real length, never an interpolation between two)."""
    rank = max(1, math.ceil(q * len(ordered)))
    return int(ordered[rank - 1])
