"""The facts a pass carries (STYLE.md habit 11): its runtime and precision, where it applies,
its prior speed-up per hardware path (with the prior's source), its cost model and the default
plans it belongs to. ``registry.py`` keeps them beside the pass's factory; the builder, the
ordering, the costs, the report and ``doctor`` read them there, so nothing branches on a name.

Hardware paths: the way this machine runs the pass's arithmetic. CPU passes look up the most
specific path first (a Xeon with AMX: ``amx``, then ``vnni``); GPU passes look up ``gpu``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from infertune.hardware import VNNI_FLAGS, GpuInfo, HardwareInfo
from infertune.serial import Serial

Device = Literal["cpu", "gpu"]
Tier = Literal["quick", "full"]
# A CPU path names how INT8/BF16 products run; "gpu" is the NVIDIA device.
HardwarePath = Literal["amx", "vnni", "no-vnni", "arm-dot", "gpu"]
AMX_FLAGS = ("amx_int8", "amx_bf16")
# How a CPU flag is called in a sentence ("needs AMX (amx_bf16) or avx512_bf16").
FLAG_WORDS = {"amx_bf16": "AMX (amx_bf16)", "amx_int8": "AMX (amx_int8)",
              "amx_fp16": "AMX (amx_fp16)"}
RUNTIME_TITLES = {"onnxruntime": "ONNX Runtime", "torch": "PyTorch", "openvino": "OpenVINO"}

MEASURED_SPREAD = 0.35  # log-sd: one model's figure stands for every model of the family
GUESS_SPREAD = 0.6
NEUTRAL_SOURCE = "no measurement: a neutral prior (speed-up 1.0, wide spread)"


@dataclass(frozen=True)
class Prior:
    """What a pass is expected to give before it is measured: the median p95 speed-up over
    the eager baseline at batch 1, its spread (log-sd), and the chance its variant meets the
    floor; ``source`` says where the figure comes from (measured where, or an estimate)."""

    speedup: float
    spread: float
    p_quality: float
    source: str
    # inputs/s over the eager baseline's at batch 16, where the same source measured it: what
    # the pass gives when serving forms full batches (issue 27: the order changes there)
    batched: float | None = None

    def at_batches(self, batched: bool) -> Prior:
        """This prior, or its batch-16 figure when the traffic forms full batches."""
        if not batched or self.batched is None:
            return self
        return Prior(self.batched, self.spread, self.p_quality,
                     f"{self.source}; batch-16 inputs/s over the baseline's")


NEUTRAL = Prior(1.0, GUESS_SPREAD, 0.9, NEUTRAL_SOURCE)


@dataclass(frozen=True)
class Priors:
    """A pass's priors by hardware path; ``default`` stands for the paths not listed."""

    by_path: Mapping[str, Prior] = field(default_factory=dict)
    default: Prior = NEUTRAL

    def on(self, paths: Sequence[str]) -> Prior:
        """The prior of the first of ``paths`` (most specific first) that has one."""
        for path in paths:
            if path in self.by_path:
                return self.by_path[path]
        return self.default

    def derived(self, spread: float, p_quality: float, prefix: str) -> Priors:
        """The same speed-ups, held less sure (a pass expected to behave like this one)."""
        def less_sure(p: Prior) -> Prior:
            return Prior(p.speedup, spread, p_quality, f"{prefix} ({p.source}), less sure of "
                         "the floor")
        return Priors({k: less_sure(p) for k, p in self.by_path.items()},
                      less_sure(self.default))


def everywhere(prior: Prior) -> Priors:
    """One figure for every path (a pass whose gain does not depend on the CPU's INT8 path)."""
    return Priors(default=prior)


def cpu_paths(hw: HardwareInfo) -> tuple[HardwarePath, ...]:
    """The CPU's paths, most specific first: a Xeon with AMX is ("amx", "vnni")."""
    if any(hw.has(f) for f in VNNI_FLAGS):
        return ("amx", "vnni") if any(hw.has(f) for f in AMX_FLAGS) else ("vnni",)
    arm = hw.arch.startswith(("arm", "aarch")) or hw.has("neon")
    if arm and (hw.has("asimd_dotprod") or hw.has("i8mm")):
        return ("arm-dot",)
    return ("no-vnni",)


def gpu_capability(hw: HardwareInfo) -> float:
    """The best NVIDIA compute capability on the machine (0.0: none, or not reported)."""
    return max((_capability(g) for g in hw.gpus), default=0.0)


def _capability(gpu: GpuInfo) -> float:
    try:
        return float(gpu.compute_capability or 0)
    except ValueError:
        return 0.0


@dataclass(frozen=True)
class Requires:
    """Where a pass applies, judged on a (possibly described) machine and model kind.

    ``cpu_flags_any``: one of these CPU flags; ``gpu_capability``: an NVIDIA GPU of at least
    this compute capability; ``libraries``: Python packages as HardwareInfo.libraries names
    them; ``model_kinds``: the baseline kinds it builds from (empty: any). ``why`` says what
    the rule protects against, for doctor."""

    cpu_flags_any: tuple[str, ...] = ()
    or_gpu_capability: float | None = None  # a GPU this good stands in for the CPU flags
    gpu_capability: float | None = None
    libraries: tuple[str, ...] = ()
    model_kinds: tuple[str, ...] = ()
    why: str = ""

    def needs(self) -> str:
        """What the hardware would take, as a phrase ("needs AMX (amx_bf16) or avx512_bf16");
        the libraries and model kinds are said apart (``missing``, ``reason``)."""
        parts = []
        if self.cpu_flags_any:
            words = [FLAG_WORDS.get(f, f) for f in self.cpu_flags_any]
            if self.or_gpu_capability is not None:
                words.append(f"an NVIDIA GPU of compute capability {self.or_gpu_capability:g}+")
            parts.append(" or ".join(words))
        if self.gpu_capability is not None:
            parts.append(f"an NVIDIA GPU of compute capability {self.gpu_capability:g}+")
        return "needs " + " and ".join(parts) if parts else "runs on any CPU"

    def missing(self, hw: HardwareInfo) -> list[str]:
        """The required libraries ``hw`` does not list as installed (doctor reads this; the
        build itself finds out by importing them, so a described machine need not list them)."""
        return [lib for lib in self.libraries if lib not in hw.libraries]

    def reason(self, hw: HardwareInfo, kind: str | None = None) -> str | None:
        """None where the hardware (and a ``kind`` model, when given) suits the pass; else why
        not, in one sentence that says what it would take. Libraries: see ``missing``."""
        gpu_instead = (self.or_gpu_capability is not None and bool(hw.gpus)
                       and gpu_capability(hw) >= self.or_gpu_capability)
        if self.cpu_flags_any and not gpu_instead \
                and not any(hw.has(f) for f in self.cpu_flags_any):
            gpu = " and no such GPU" if self.or_gpu_capability is not None else ""
            return (f"{self.needs()}; this CPU ({hw.cpu_model}) has none of "
                    f"{', '.join(self.cpu_flags_any)}{gpu}")
        if self.gpu_capability is not None:
            found = gpu_capability(hw)
            if found < self.gpu_capability:
                have = (f"the best GPU here has compute {found:g}" if found
                        else "this machine has no NVIDIA GPU")
                return f"{self.needs()}; {have}"
        if kind is not None and self.model_kinds and kind not in self.model_kinds:
            return f"builds from {' or '.join(self.model_kinds)} models; this is a {kind} model"
        return None

    def basis(self, hw: HardwareInfo) -> str:
        """What on ``hw`` makes it apply (doctor's "why"), assuming ``reason`` said None."""
        flags = [f for f in self.cpu_flags_any if hw.has(f)]
        if flags:
            return f"{', '.join(flags)} present"
        if self.cpu_flags_any or self.gpu_capability is not None:
            best = max(hw.gpus, key=_capability)
            return f"GPU {best.name} (compute {best.compute_capability})"
        return "no special hardware needed"


@dataclass(frozen=True)
class CostFacts(Serial):
    """The measured times a cost estimate scales from, and the run's sample counts."""

    call_ms: float  # baseline batch-1 median, measured
    item_ms: float  # baseline time per input at batch 16 (the quality runs), measured
    cal_item_ms: float | None = None  # the same on the calibration inputs (the shortest)
    export_s: float | None = None  # the run's ONNX export, measured once built
    params_m: float | None = None  # million parameters (from the weight files)
    matmuls: int = 0  # MatMul/Gemm nodes in the exported graph (mixed precision scores each)
    schemes: int = 1  # INT8 schemes tried on this CPU
    n_quality: int = 300
    n_calibration: int = 128
    n_samples: int = 32

    @property
    def export(self) -> float:
        """The export's seconds: measured, else scaled from the parameter count."""
        if self.export_s is not None:
            return self.export_s
        return EXPORT_S_PER_MPARAM * (self.params_m if self.params_m is not None else 25.0)

    @property
    def check_s(self) -> float:
        """The build check: the sample inputs through the variant once."""
        return self.n_samples * self.item_ms / 1000.0

    @property
    def scored_s(self) -> float:
        """One scoring run on the calibration inputs."""
        cal_ms = self.cal_item_ms if self.cal_item_ms is not None else self.item_ms
        return self.n_calibration * cal_ms / 1000.0

    @property
    def basis(self) -> str:
        parts = [f"a batch-1 call of {self.call_ms:.1f} ms and {self.item_ms:.1f} ms per input "
                 "at batch 16, measured here"]
        if self.export_s is not None:
            parts.append(f"an ONNX export of {self.export_s:.3g} s, measured here")
        elif self.params_m is not None:
            parts.append(f"{self.params_m:.3g}M parameters (export estimated at "
                         f"{EXPORT_S_PER_MPARAM} s per million)")
        return "; ".join(parts)


# The ratios were measured with `optimize.passes.build_variants` on minilm (22.7M parameters)
# and a BERT-base-sized encoder (110M) on a 2-core AVX2 EPYC shared with other jobs
# (2026-12-01); they put a pass's build time in units of the same run's export time.
# Seconds of ONNX export (torch.onnx.export + the build check) per million parameters, before
# the run has measured its own export: minilm 8.3 s / 22.7M, BERT-base 40 s / 110M here.
EXPORT_S_PER_MPARAM = 0.37
TORCH_COPY_RATIO = 1.0  # torch_fp32: saving the eager model and checking it
FUSE_RATIO = 1.1  # the transformer optimizer's fusion
QUANT_RATIO = 0.2  # one quantize_dynamic call (the calibration scoring is counted apart)


class CostModel(Protocol):
    def build_s(self, f: CostFacts) -> float:
        """Estimated seconds to build the pass (its sources not included) and check it."""


@dataclass(frozen=True)
class ExportCost:
    """A build that costs ``ratio`` exports (plus the build check when ``check``)."""

    ratio: float = 1.0
    check: bool = False

    def build_s(self, f: CostFacts) -> float:
        return self.ratio * f.export + (f.check_s if self.check else 0.0)


@dataclass(frozen=True)
class QuantizeCost:
    """INT8 by onnxruntime's quantizer: one call per scheme tried ("dynamic"), plus a
    calibration run each ("static"), or one per scored MatMul and the mix ("mixed")."""

    kind: Literal["dynamic", "static", "mixed"]

    def build_s(self, f: CostFacts) -> float:
        quant = QUANT_RATIO * f.export + f.scored_s
        if self.kind == "mixed":
            # every MatMul quantized alone and scored, then the mix (one scheme choice first)
            return (max(f.matmuls, 1) + f.schemes) * quant + f.check_s
        if self.kind == "static":
            return f.schemes * (quant + f.scored_s) + f.check_s
        return f.schemes * quant + f.check_s


@dataclass(frozen=True)
class SettingCost:
    """A session setting on a built graph (threads, graph level): a copy and the check."""

    seconds: float = 1.0

    def build_s(self, f: CostFacts) -> float:
        return f.check_s + self.seconds


UNKNOWN_COST = ExportCost(1.0, check=True)


@dataclass(frozen=True)
class InPlan:
    """A default plan the pass belongs to: for ``kind`` models, in the ``quick`` plan (and so
    the full one) or only the ``full`` one, at ``rank`` (the hand-written order, cheapest and
    most promising first: a short budget keeps a prefix)."""

    kind: str
    tier: Tier
    rank: int


@dataclass(frozen=True)
class PassFacts:
    """Everything the search knows about a pass before it runs it."""

    runtime: str
    precision: str
    device: Device = "cpu"
    requires: Requires = Requires()
    priors: Priors = Priors()
    cost: CostModel = UNKNOWN_COST
    plans: tuple[InPlan, ...] = ()
    option: str | None = None  # the knowledge-base option its measured A/B stands for
    summary: str = ""  # one line for doctor
    engine: str = ""  # how doctor names the engine when not the runtime ("TensorRT")

    def paths(self, hw: HardwareInfo) -> tuple[HardwarePath, ...]:
        return ("gpu",) if self.device == "gpu" else cpu_paths(hw)

    def prior(self, hw: HardwareInfo, batched: bool = False) -> Prior:
        return self.priors.on(self.paths(hw)).at_batches(batched)

    def reason(self, hw: HardwareInfo, kind: str | None = None) -> str | None:
        return self.requires.reason(hw, kind)

    def plan(self, kind: str) -> InPlan | None:
        return next((p for p in self.plans if p.kind == kind), None)

    @property
    def engine_name(self) -> str:
        return self.engine or RUNTIME_TITLES.get(self.runtime, self.runtime)

    @property
    def title(self) -> str:
        return f"{self.engine_name} {self.precision}"


UNKNOWN = PassFacts(runtime="unknown", precision="unknown",
                    summary="not declared: registered without facts")
