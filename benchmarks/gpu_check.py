"""Builds and measures each NVIDIA GPU variant in one short run, against torch fp32 eager on the
same GPU: onnxruntime CUDA FP16 (IO binding), onnxruntime TensorRT FP16 (engine cache, the
profile from the held-out texts' token lengths) and torch FP16. For each: p50/p95 at batch 1
and 16 and their ratio to fp32 eager's p95, agreement with fp32 eager (mean and min cosine on
the held-out texts), and the GPU's utilisation and memory while the variant ran (NVML: the
device's, and this process's own where NVML reports it). Each variant is timed in two rounds,
in opposite orders, in this one process.

    python benchmarks/gpu_check.py                 # on a machine with an NVIDIA GPU
    python benchmarks/gpu_check.py --dry-run       # anywhere: everything but the device

Needs, on the GPU machine: the gpu extra (onnxruntime-gpu in place of onnxruntime), a CUDA
build of torch (it brings CUDA 12 and cuDNN 9), and the tensorrt-cu12 wheels for the TensorRT
variant; a variant whose library is missing is reported as skipped with the reason.

On a machine without a GPU it exits with status 2 and says so. ``--dry-run`` describes a T4
(compute 7.5) with every GPU provider available, builds the same variants, and runs them on
the CPU provider (onnxruntime) and the CPU (torch fp16): the graphs, the profile, IO binding,
the agreement and the table are real, the timings are the CPU's and labelled so. Exit status
1 when a variant that should run on this GPU was skipped (the reason is in the table).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from infertune.data import default_heldout
from infertune.hardware import GpuInfo, HardwareInfo, detect
from infertune.measure.utilisation import Utilisation, UtilisationSampler
from infertune.models import load
from infertune.models.adapter import Adapter
from infertune.models.gpu import OrtGpuRunner
from infertune.models.runners import TorchRunner, hf_call
from infertune.models.variant import load_variant
from infertune.optimize.passes import build_variants
from infertune.optimize.passes.base import Pass, PassContext
from infertune.optimize.passes.ort_cuda_fp16 import OrtCudaFp16Pass
from infertune.optimize.passes.ort_tensorrt_fp16 import OrtTensorrtFp16Pass
from infertune.optimize.passes.torch_fp16 import TorchFp16Pass
from infertune.optimize.passes.variant_files import Variant, agreement, predict_rows

BATCHES = (1, 16)
DRY_GPU = GpuInfo("dry run: described Tesla T4", 15.0, "none", "7.5")
DRY_PROVIDERS = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
NO_GPU = ("gpu_check: no NVIDIA GPU on this machine (NVML lists none), so there is nothing to "
          "measure; run it on a GPU machine, or pass --dry-run to build every GPU variant and "
          "run it on the CPU instead")


@dataclass
class Setup:
    """Where the variants run: the real GPU, or the dry run's described one on the CPU."""

    hardware: HardwareInfo
    dry_run: bool
    providers: Callable[[], list[str]] | None = None  # None: onnxruntime's own list
    cuda_available: Callable[[], bool] | None = None  # None: torch's own view

    @property
    def device(self) -> str:
        return "cpu" if self.dry_run else "cuda"


@dataclass
class Row:
    variant: str
    status: str  # "measured" | "skipped"
    reason: str = ""
    runs_on: str = ""
    build_s: float | None = None
    first_call_s: float | None = None
    p50_ms: dict[int, float] = field(default_factory=dict)
    p95_ms: dict[int, float] = field(default_factory=dict)
    p95_vs_fp32: dict[int, float] = field(default_factory=dict)
    mean_cosine: float | None = None
    min_cosine: float | None = None
    gpu_util_mean: float | None = None
    gpu_memory_peak_mb: float | None = None
    process_gpu_memory_peak_mb: float | None = None


# ---------------------------------------------------------------------------- building


def gpu_passes(setup: Setup) -> list[Pass]:
    return [OrtCudaFp16Pass(setup.providers), OrtTensorrtFp16Pass(setup.providers),
            TorchFp16Pass(setup.cuda_available)]


def build(pass_: Pass, source: Variant | None, ctx: PassContext) -> tuple[Variant | None, str,
                                                                           float]:
    """(variant, why not, seconds): the pass's own gate first, as optimize judges it."""
    started = time.perf_counter()
    reason = pass_.applies(ctx)
    if reason is not None:
        return None, reason, 0.0
    try:
        variant = pass_.apply(source, ctx)
    except Exception as exc:  # noqa: BLE001 - converters raise untyped errors; say which
        return None, f"{type(exc).__name__} while building: {str(exc).splitlines()[0][:200]}", 0.0
    return variant, "", time.perf_counter() - started


def open_variant(variant: Variant, baseline: Adapter, setup: Setup) -> Adapter:
    """As serve opens it (load_variant) on the GPU; on the CPU stand-ins in a dry run."""
    if not setup.dry_run:
        return load_variant(variant.path)
    manifest = variant.manifest
    if manifest.gpu is not None:
        runner = OrtGpuRunner.open_gpu(str(variant.path / manifest.model_file), manifest.gpu,
                                       precision=manifest.precision, stand_in_cpu=True)
        return baseline.with_runner(runner)
    import torch
    import transformers

    module = transformers.AutoModel.from_pretrained(
        str(variant.path / manifest.model_file), local_files_only=True).eval()
    return baseline.with_runner(TorchRunner(module.to(torch.float16), baseline.info.input_names,
                                            call=hf_call(_output_field(baseline)),
                                            precision="fp16", device="cpu"))


def fp32_eager(baseline: Adapter, device: str) -> Adapter:
    """The baseline's own module in fp32 on ``device`` (a copy: the baseline stays on CPU)."""
    module = copy.deepcopy(cast(Any, baseline.runner).module).to(device)  # a TorchRunner
    return baseline.with_runner(TorchRunner(module, baseline.info.input_names,
                                            call=hf_call(_output_field(baseline)),
                                            device=device))


def _output_field(baseline: Adapter) -> str:
    return "last_hidden_state" if baseline.info.task == "embedding" else "logits"


# ---------------------------------------------------------------------------- measuring


def batches(texts: Sequence[Any], size: int, count: int) -> list[list[Any]]:
    return [[texts[(i * size + j) % len(texts)] for j in range(size)] for i in range(count)]


def time_calls(adapter: Adapter, inputs: list[list[Any]]) -> list[float]:
    times = []
    for batch in inputs:
        start = time.perf_counter()
        adapter.predict(batch)  # returns host arrays: the device has finished
        times.append((time.perf_counter() - start) * 1000)
    return times


def measure(adapters: dict[str, Adapter], texts: Sequence[Any], calls: int, warmup: int
            ) -> dict[str, tuple[dict[int, list[float]], Any]]:
    """Per variant: call times (ms) per batch size, and utilisation while it ran. Two rounds
    in opposite orders, so drift on the machine lands on every variant alike."""
    names = list(adapters)
    found: dict[str, dict[int, list[float]]] = {n: {b: [] for b in BATCHES} for n in names}
    samples: dict[str, list[Any]] = {n: [] for n in names}
    for round_names in (names, names[::-1]):
        for name in round_names:
            adapter = adapters[name]
            for size in BATCHES:
                time_calls(adapter, batches(texts, size, warmup))
            with UtilisationSampler(interval_s=0.05) as sampler:
                for size in BATCHES:
                    found[name][size] += time_calls(adapter, batches(texts, size,
                                                                     max(1, calls // 2)))
            samples[name] += sampler.samples
    return {n: (found[n], Utilisation.from_samples(samples[n], 0.05) if samples[n] else None)
            for n in names}


def fill(row: Row, times: dict[int, list[float]], util: Any, fp32: dict[int, list[float]]
         ) -> None:
    for size in BATCHES:
        row.p50_ms[size] = float(np.percentile(times[size], 50))
        row.p95_ms[size] = float(np.percentile(times[size], 95))
        row.p95_vs_fp32[size] = float(np.percentile(fp32[size], 95)) / row.p95_ms[size]
    if util is not None:
        row.gpu_util_mean = util.gpu_util_mean
        row.gpu_memory_peak_mb = util.gpu_memory_peak_mb
        row.process_gpu_memory_peak_mb = util.gpu_process_memory_peak_mb


# ---------------------------------------------------------------------------- the run


def run(setup: Setup, model: str, out: Path, calls: int, warmup: int, n_quality: int
        ) -> list[Row]:
    baseline = load(model)
    texts = list(default_heldout().inputs)
    ctx = PassContext(baseline, setup.hardware, out, calibration=texts, n_samples=n_quality)
    built: dict[str, Variant] = {}
    build_variants(baseline, ctx, names=["ort_fp32"], built=built)
    fp32 = fp32_eager(baseline, setup.device)
    quality = texts[:n_quality]
    reference = predict_rows(fp32, quality)
    rows = {"torch_fp32_eager": Row("torch_fp32_eager", "measured",
                                    runs_on=f"torch {setup.device}")}
    adapters: dict[str, Adapter] = {"torch_fp32_eager": fp32}
    for pass_ in gpu_passes(setup):
        source = built.get(pass_.source) if pass_.source else None
        variant, reason, seconds = build(pass_, source, ctx)
        row = Row(pass_.name, "skipped", reason=reason)
        rows[pass_.name] = row
        if variant is None:
            continue
        try:
            started = time.perf_counter()
            adapter = open_variant(variant, baseline, setup)
            adapter.predict(quality[:1])  # TensorRT builds its engines here
        except Exception as exc:  # noqa: BLE001 - a load failure is a row, not a crash
            row.reason = f"{type(exc).__name__} at load: {str(exc).splitlines()[0][:200]}"
            continue
        row.first_call_s = time.perf_counter() - started
        row.status, row.build_s = "measured", seconds
        row.runs_on = _runs_on(adapter, setup)
        found = agreement(reference, predict_rows(adapter, quality))
        row.mean_cosine, row.min_cosine = found.mean_cosine, found.min_cosine
        adapters[pass_.name] = adapter
    rows["torch_fp32_eager"].mean_cosine = rows["torch_fp32_eager"].min_cosine = 1.0
    timed = measure(adapters, texts, calls, warmup)
    for name, (times, util) in timed.items():
        fill(rows[name], times, util, timed["torch_fp32_eager"][0])
    return list(rows.values())


def _runs_on(adapter: Adapter, setup: Setup) -> str:
    runner = adapter.runner
    if isinstance(runner, OrtGpuRunner):
        return ",".join(runner.session.get_providers())
    return f"torch {getattr(runner, 'device', '?')}"


def table(rows: list[Row], setup: Setup) -> str:
    gpu = setup.hardware.gpus[0]
    head = (f"# {gpu.name} (compute {gpu.compute_capability}), driver {gpu.driver}; "
            f"CPU {setup.hardware.cpu_model}")
    if setup.dry_run:
        head += ("\n# DRY RUN: no GPU used; every variant ran on the CPU (onnxruntime's CPU "
                 "provider, torch on cpu): the timings are the CPU's, not GPU figures")
    lines = [head, f"{'variant':18s} {'status':8s} {'b1 p50':>7s} {'b1 p95':>7s} "
             f"{'b16 p50':>8s} {'b16 p95':>8s} {'x fp32 b1':>9s} {'x fp32 b16':>10s} "
             f"{'mean cos':>9s} {'min cos':>8s} {'GPU %':>6s} {'GPU MiB':>8s} {'own MiB':>8s}"
             "  runs on / reason"]
    for r in rows:
        if r.status != "measured":
            lines.append(f"{r.variant:18s} {'skipped':8s} {'':>112s}  {r.reason}")
            continue
        lines.append(
            f"{r.variant:18s} {r.status:8s} {r.p50_ms[1]:7.2f} {r.p95_ms[1]:7.2f} "
            f"{r.p50_ms[16]:8.2f} {r.p95_ms[16]:8.2f} {r.p95_vs_fp32[1]:8.2f}x "
            f"{r.p95_vs_fp32[16]:9.2f}x {_f(r.mean_cosine, 6, 9)} {_f(r.min_cosine, 6, 8)} "
            f"{_f(r.gpu_util_mean, 0, 6)} {_f(r.gpu_memory_peak_mb, 0, 8)} "
            f"{_f(r.process_gpu_memory_peak_mb, 0, 8)}  {r.runs_on}")
    lines.append("# times in ms per call (preprocess + forward + postprocess); x fp32: fp32 "
                 "eager's p95 / the variant's (higher is faster); GPU %/MiB: NVML device "
                 "readings while the variant ran, own MiB: this process's (n/a where NVML does "
                 "not report it)")
    return "\n".join(lines)


def _f(value: float | None, digits: int, width: int) -> str:
    return f"{'n/a':>{width}s}" if value is None else f"{value:{width}.{digits}f}"


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true",
                        help="describe a T4 and run every variant on the CPU (no GPU needed)")
    parser.add_argument("--model", default="minilm", help="model reference (default minilm)")
    parser.add_argument("--calls", type=int, default=None,
                        help="timed calls per batch size (default 100; 6 with --dry-run)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--quality-n", type=int, default=64, help="texts for the agreement")
    parser.add_argument("--out", type=Path, default=None, help="variants folder (default temp)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, hardware: HardwareInfo | None = None) -> int:
    args = parse(argv)
    hw = hardware or detect()
    if args.dry_run:
        setup = Setup(dataclasses.replace(hw, gpus=[DRY_GPU]), True,
                      lambda: list(DRY_PROVIDERS), lambda: True)
    elif not hw.gpus:
        print(NO_GPU, file=sys.stderr)
        return 2
    else:
        setup = Setup(hw, False)
    calls = args.calls or (6 if args.dry_run else 100)
    out = args.out or Path(tempfile.mkdtemp(prefix="gpu_check-"))
    rows = run(setup, args.model, out, calls, args.warmup, args.quality_n)
    print(table(rows, setup))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    skipped = [r.variant for r in rows if r.status != "measured"]
    if skipped:
        print(f"gpu_check: not measured: {', '.join(skipped)} (reasons above)", file=sys.stderr)
    return 1 if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
