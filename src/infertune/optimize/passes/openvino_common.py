"""What the OpenVINO passes share: where they apply, the IR folder they derive from their
source, the precision read back from the compiled model, and the two measurements each build
makes on the machine at hand (static sequence buckets against dynamic shapes; compilation with
an empty model cache against a warm one).

Every variant starts from an ONNX export (``ort_fp32``): ``openvino.convert_model`` reads ONNX,
and the export is what every other engine starts from too, so their numerics compare.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import random
import tempfile
import time
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

import numpy as np

from infertune.errors import NotApplicableError
from infertune.hardware import HardwareInfo
from infertune.models.openvino_runner import OpenVinoSettings, OvRunner
from infertune.models.text import TextAdapter
from infertune.models.variant import Manifest, PassRecord, ThreadSettings
from infertune.optimize.passes._text import TOKENIZER_DIR
from infertune.optimize.passes.base import PassContext
from infertune.optimize.passes.facts import QUANT_RATIO, CostFacts
from infertune.optimize.passes.variant_files import (
    Variant,
    fresh_dir,
    library_versions,
    link_or_copy,
)
from infertune.serial import Serial

XML_FILE = "model.xml"
# OpenVINO computes BF16 natively with these (AMX tiles, or AVX-512 BF16 dot products);
# elsewhere a bf16 hint is emulated or silently dropped
BF16_FLAGS = ("amx_bf16", "avx512_bf16")
# static shapes must beat dynamic ones by more than this share of p95 to be kept: fewer
# compiled models (memory, compile time) wins a tie
STATIC_MARGIN = 0.05


@dataclass(frozen=True)
class OpenVinoCost:
    """Estimated build seconds, scaled from the run's measured export and call times: the
    conversion (taken as half an export: it reads the exported graph, no tracing), the shape
    choice (both candidates on the sample inputs at batch 1, twice) and the build check; INT8
    adds NNCF's calibration (taken as an onnxruntime quantize call) and two scoring runs on the
    calibration inputs (NNCF's result and the f32 IR). Accuracy control, when the floor needs
    it, costs more than this: a scoring run per layer it ranks."""

    int8: bool = False

    def build_s(self, f: CostFacts) -> float:
        shapes = 4 * f.n_samples * f.call_ms / 1000.0
        if self.int8:
            return QUANT_RATIO * f.export + 2 * f.scored_s + f.check_s
        return 0.5 * f.export + shapes + f.check_s


def openvino_reason(ctx: PassContext) -> str | None:
    """None when an OpenVINO variant can be built here; else why not."""
    if importlib.util.find_spec("openvino") is None:
        return "needs OpenVINO: pip install 'infertune[openvino]'"
    if not isinstance(ctx.baseline, TextAdapter):
        return (f"OpenVINO variants are built for text models; {ctx.baseline.info.id} is a "
                f"{ctx.baseline.info.kind} model")
    if not ctx.hardware.arch.startswith(("x86", "amd64", "AMD64", "i686")) and ctx.hardware.arch:
        return f"OpenVINO's CPU plugin is used on x86-64 here; this machine is {ctx.hardware.arch}"
    return None


def bf16_reason(hw: HardwareInfo) -> str | None:
    """None when this CPU computes BF16 natively; else what it would take."""
    if any(hw.has(flag) for flag in BF16_FLAGS):
        return None
    return ("OpenVINO bf16 needs AMX (amx_bf16) or avx512_bf16; this CPU has neither, so bf16 "
            "would be emulated or run as f32")


def new_ir_folder(source: Variant, ctx: PassContext, name: str) -> tuple[Path, Manifest]:
    """A fresh folder for ``name`` with the source's tokenizer and a manifest copied from the
    source's, switched to OpenVINO."""
    folder = fresh_dir(ctx.out_dir, name)
    manifest = copy.deepcopy(source.manifest)
    tok = source.manifest.preprocessing.tokenizer_dir
    if tok:
        link_or_copy(source.path / tok, folder / TOKENIZER_DIR)
        manifest.preprocessing.tokenizer_dir = TOKENIZER_DIR
    manifest.id = name
    manifest.runtime = "openvino"
    manifest.model_file = XML_FILE
    manifest.threads = ThreadSettings()  # onnxruntime's; OpenVINO's are in manifest.openvino
    manifest.op_counts = {}
    manifest.agreement = None
    manifest.libraries = library_versions() | {
        name: metadata.version(name) for name in ("openvino", "nncf")
        if importlib.util.find_spec(name) is not None}
    manifest.fp32_layers = []
    return folder, manifest


def read_back(runner: OvRunner, record: PassRecord, wanted: str) -> str:
    """Record the precision the compiled model runs in; refuse the variant when it is not the
    one asked for (on AMX an f32 model runs in bf16 unless the hint says f32; a bf16 hint on a
    CPU without BF16 runs f32), since it would duplicate another variant under a wrong name."""
    record.settings |= {"precision_hint": runner.settings.precision_hint,
                        "precision_property": runner.precision_property,
                        "compute_precisions": runner.precisions,
                        "ran_precision": runner.precision}
    if runner.precision != wanted:
        raise NotApplicableError(
            f"asked OpenVINO for {wanted} (INFERENCE_PRECISION_HINT="
            f"{runner.settings.precision_hint}); the compiled model runs its matrix multiplies "
            f"in {runner.precision} ({runner.precisions})")
    return runner.precision


@dataclass(frozen=True)
class ShapeTiming(Serial):
    p50_ms: float
    p95_ms: float
    calls: int

    def to_settings(self) -> ShapeTiming:
        """As recorded: milliseconds rounded to the microsecond."""
        return replace(self, p50_ms=round(self.p50_ms, 3), p95_ms=round(self.p95_ms, 3))


@dataclass(frozen=True)
class ShapeTrial(Serial):
    """One shape mode as timed on its fresh runner: ShapeTiming and its two compile times."""

    p50_ms: float
    p95_ms: float
    calls: int
    empty_cache_s: float
    warm_cache_s: float


@dataclass(frozen=True)
class ShapeChoice(Serial):
    """choose_shapes' evidence, as the record's ``shapes`` holds it."""

    measured_on: str
    batch: int
    static_lengths: list[int]
    chosen: str  # "dynamic" | "static"
    rule: str
    dynamic: ShapeTrial
    static: ShapeTrial


def static_lengths(manifest: Manifest) -> list[int]:
    """The sequence lengths to compile statically: the manifest's buckets up to max_length,
    and max_length itself (so every input fits one)."""
    pre = manifest.preprocessing
    limit = pre.max_length or max(pre.buckets or [512])
    return sorted({b for b in pre.buckets if b < limit} | {limit})


def choose_shapes(xml: Path, settings: OpenVinoSettings, manifest: Manifest, ctx: PassContext,
                  record: PassRecord) -> OpenVinoSettings:
    """Dynamic shapes or static sequence buckets, whichever had the lower p95 at batch 1 on the
    sample inputs (in a shuffled order, the first sight of each length included: that is when
    dynamic shapes compile new kernels), timed alternately on fresh runners. Each runner's
    cold compile (empty cache) and warm compile (the cache it filled) are recorded too."""
    lengths = static_lengths(manifest)
    candidates = {"dynamic": replace(settings, static_lengths=[]),
                  "static": replace(settings, static_lengths=lengths)}
    inputs = list(ctx.sample_inputs())
    random.Random(0).shuffle(inputs)
    timings: dict[str, list[float]] = {k: [] for k in candidates}
    compile_s: dict[str, tuple[float, float]] = {}  # (empty cache, warm cache) seconds
    with tempfile.TemporaryDirectory() as tmp:
        runners = {}
        for key, cand in candidates.items():
            cache = str(Path(tmp) / key)
            runners[key] = OvRunner(str(xml), cand, cache_dir=cache)
            cold = runners[key].compile_s
            warm = OvRunner(str(xml), cand, cache_dir=cache).compile_s
            compile_s[key] = (round(cold, 3), round(warm, 3))
        adapters = {k: ctx.baseline.with_runner(r) for k, r in runners.items()}
        for _ in range(2):
            for text in inputs:
                for key, adapter in adapters.items():
                    started = time.perf_counter()
                    adapter.predict([text])
                    timings[key].append((time.perf_counter() - started) * 1000)
    found = {k: ShapeTiming(float(np.percentile(v, 50)), float(np.percentile(v, 95)), len(v))
             for k, v in timings.items()}
    static_wins = found["static"].p95_ms < found["dynamic"].p95_ms * (1 - STATIC_MARGIN)
    chosen = "static" if static_wins else "dynamic"
    trials = {k: ShapeTrial(**dataclasses.asdict(t.to_settings()), empty_cache_s=compile_s[k][0],
                            warm_cache_s=compile_s[k][1]) for k, t in found.items()}
    record.settings["shapes"] = ShapeChoice(
        measured_on=ctx.hardware.cpu_model, batch=1, static_lengths=lengths, chosen=chosen,
        rule=f"static only when its p95 is over {STATIC_MARGIN:.0%} below dynamic's",
        dynamic=trials["dynamic"], static=trials["static"]).to_dict()
    if static_wins:
        pre = manifest.preprocessing
        pre.padding, pre.buckets = "bucket", lengths
    return candidates[chosen]


def serve_threads(settings: OpenVinoSettings, ctx: PassContext,
                  record: PassRecord) -> OpenVinoSettings:
    """One stream on every usable core, as a single worker runs it; serve reopens the model
    with one stream per worker and cores // workers threads each (serve/worker_threads.py)."""
    record.settings |= {"num_streams": 1, "num_threads": "0: the cores the process may use "
                        "(cgroup quota counted) at load", "effective_cores_at_build":
                        ctx.hardware.effective_cores,
                        "serve_rule": "workers streams x cores // workers threads"}
    return replace(settings, num_streams=1, num_threads=0)
