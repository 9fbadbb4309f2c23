"""Shared body of the onnxruntime passes: graph statistics, INT8 scheme choice, and a base
class that derives a new model.onnx from its source variant's and carries the rest over."""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infertune.errors import NotApplicableError
from infertune.hardware import VNNI_FLAGS, HardwareInfo
from infertune.models.runners import OrtRunner, ort_session
from infertune.models.variant import Agreement, Int8SchemeSettings, Manifest, PassRecord
from infertune.optimize.passes._text import TOKENIZER_DIR
from infertune.optimize.passes.base import PassContext, PassSettings, built
from infertune.optimize.passes.facts import Requires
from infertune.optimize.passes.variant_files import (
    Variant,
    agreement,
    finalize,
    fresh_dir,
    link_or_copy,
    predict_rows,
)
from infertune.serial import Serial

# what every onnxruntime pass needs installed
ORT = Requires(libraries=("onnx", "onnxruntime"))

MODEL_FILE = "model.onnx"
# Operators whose presence in the saved graph proves a fusion or quantization happened.
COUNTED_OPS = ("Attention", "MultiHeadAttention", "SkipLayerNormalization",
               "EmbedLayerNormalization", "BiasGelu", "FastGelu", "Gelu", "LayerNormalization",
               "MatMul", "MatMulInteger", "DynamicQuantizeMatMul", "QAttention",
               "DynamicQuantizeLinear", "QuantizeLinear", "DequantizeLinear", "QLinearMatMul")


@contextlib.contextmanager
def quiet_quantizer() -> Iterator[None]:
    """onnxruntime.quantization logs advice on the root logger and prints progress to stdout
    on every call; keep both out of infertune's output (errors still raise)."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        root.setLevel(level)


def op_counts(path: Path) -> dict[str, int]:
    """How many of each counted operator the graph file holds (read from the file itself)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    counts = Counter(node.op_type for node in model.graph.node)
    return {op: counts[op] for op in COUNTED_OPS if counts[op]}


@dataclass(frozen=True)
class SchemeTrial(Serial):
    """One INT8 scheme scored against the floor on the calibration inputs."""

    scheme: str  # Int8Scheme.label
    mean_cosine: float
    min_cosine: float
    meets_floor: bool


@dataclass(frozen=True, kw_only=True)
class Int8Settings(PassSettings, Int8SchemeSettings):
    """What every onnxruntime INT8 pass records: the scheme it chose (read back by serve) and,
    where several were safe on this CPU, each one tried and why the chosen one won."""

    scheme_trials: list[SchemeTrial] | None = built()
    scheme_choice: str | None = built()


@dataclass(frozen=True)
class Int8Scheme:
    """Activation and weight types for INT8 MatMuls on this CPU, and why."""

    activation: str  # "uint8" | "int8"
    weight: str
    reduce_range: bool
    reason: str

    @property
    def label(self) -> str:
        def letter(dtype: str) -> str:
            return "U" if dtype == "uint8" else "S"

        name = f"{letter(self.activation)}8{letter(self.weight)}8"
        return name + (" reduce_range" if self.reduce_range else "")

    def to_settings(self, trials: list[SchemeTrial] | None = None,
                    choice: str | None = None) -> Int8Settings:
        """This scheme as a pass records it, with the trials that chose it (if any)."""
        return Int8Settings(activation_type=self.activation, weight_type=self.weight,
                            reduce_range=self.reduce_range, scheme_reason=self.reason,
                            scheme_trials=trials, scheme_choice=choice)


def int8_schemes(hw: HardwareInfo) -> list[Int8Scheme]:
    """The INT8 schemes that are numerically safe on this CPU, in the order they are tried
    (expected fastest first); ``choose_int8_scheme`` keeps the first that meets the floor.

    Without VNNI, U8S8 runs on AVX2/AVX-512's vpmaddubsw, whose 16-bit pair sums saturate: on
    the test MLP (tests/helpers/onnx_graphs.py) per-channel U8S8 at full range gave max error
    0.147 against 0.037 with 7-bit weights, on a 2-core AVX2 EPYC. So full-range U8S8 is not
    offered there. U8U8 takes a non-saturating kernel and is more accurate but slower (minilm
    per channel on that CPU: mean cosine 0.9936 and p95 6.43 ms, against 0.9918 and 5.69 ms
    for U8S8 + reduce_range; issue 13's measurements), so it is the fallback, not the default.
    """
    if any(hw.has(f) for f in VNNI_FLAGS):
        return [Int8Scheme("uint8", "int8", False,
                           "VNNI present: U8S8 runs on the VNNI dot-product path without "
                           "saturation")]
    if hw.arch.startswith(("arm", "aarch")) or hw.has("neon"):
        return [Int8Scheme("int8", "int8", False, "ARM: S8S8 is onnxruntime's ARM fast path")]
    return [Int8Scheme("uint8", "int8", True,
                       "no VNNI: U8S8 on AVX2/AVX-512 can saturate in the 16-bit intermediate, "
                       "so weights use 7-bit range (reduce_range)"),
            Int8Scheme("uint8", "uint8", False,
                       "no VNNI: U8U8 avoids the saturating U8S8 kernel at full 8-bit range; "
                       "more accurate, slower")]


def int8_scheme(hw: HardwareInfo) -> Int8Scheme:
    """The first scheme tried on this CPU (what a pass uses when it cannot try several)."""
    return int8_schemes(hw)[0]


def choose_int8_scheme(ctx: PassContext, dst: Path, record: PassRecord,
                       build: Callable[[Int8Scheme, Path], None]) -> Int8Scheme:
    """Write ``dst`` with the first scheme safe on this CPU whose agreement with the baseline
    on the calibration inputs meets the floor, else with the most accurate one (the quality
    gate then judges it). Every trial is recorded in ``record.settings`` as evidence."""
    schemes = int8_schemes(ctx.hardware)
    if len(schemes) == 1:  # nothing to choose between: skip the scoring passes
        build(schemes[0], dst)
        record.settings |= schemes[0].to_settings().to_dict()
        return schemes[0]
    trials: list[SchemeTrial] = []
    with tempfile.TemporaryDirectory() as tmp:
        scored: list[tuple[Int8Scheme, Path, Agreement]] = []
        for scheme in schemes:
            trial = Path(tmp) / f"{len(scored)}.onnx"
            build(scheme, trial)
            found = score_graph(trial, ctx)
            scored.append((scheme, trial, found))
            trials.append(SchemeTrial(scheme.label, round(found.mean_cosine, 6),
                                      round(found.min_cosine, 6), ctx.quality.holds(found)))
            if ctx.quality.holds(found):
                break
        passing = [s for s in scored if ctx.quality.holds(s[2])]
        chosen = passing[0] if passing else max(scored, key=lambda s: s[2].mean_cosine)
        shutil.copyfile(chosen[1], dst)
    why = (f"first scheme meeting {ctx.quality.describe()} on "
           f"{len(ctx.calibration_inputs())} calibration inputs" if passing else
           f"no scheme met {ctx.quality.describe()}; kept the most accurate")
    record.settings |= chosen[0].to_settings(trials, why).to_dict()
    return chosen[0]


def score_graph(path: Path, ctx: PassContext) -> Agreement:
    """Agreement of the graph at ``path`` with the baseline on the calibration inputs."""
    adapter = ctx.baseline.with_runner(OrtRunner(ort_session(str(path))))
    return agreement(ctx.reference("calibration"),
                     predict_rows(adapter, ctx.calibration_inputs()))


def quant_type(name: str) -> Any:
    from onnxruntime.quantization import QuantType

    return QuantType.QInt8 if name == "int8" else QuantType.QUInt8


class OrtDerivedPass:
    """Builds ``<out>/<name>/model.onnx`` from the source variant's graph; subclasses
    implement transform(); everything else (tokenizer, inputs, threads) carries over."""

    name = "ort_derived"
    source: str | None = "ort_fp32"
    fallback_source: str | None = None
    precision = "fp32"

    def settings(self) -> PassSettings:
        return PassSettings()

    def applies(self, ctx: PassContext) -> str | None:
        return None

    def transform(self, src: Path, dst: Path, ctx: PassContext,
                  record: PassRecord) -> None:
        """Write dst from src; add settings found at build time to record.settings."""
        link_or_copy(src, dst)

    def apply(self, source: Variant | None, ctx: PassContext) -> Variant:
        if source is None or source.manifest.runtime != "onnxruntime":
            raise NotApplicableError(f"{self.name} needs an onnxruntime source variant")
        folder = fresh_dir(ctx.out_dir, self.name)
        manifest = copy.deepcopy(source.manifest)
        record = PassRecord(self.name, self.settings().to_dict())
        self.transform(source.path / source.manifest.model_file, folder / MODEL_FILE, ctx,
                       record)
        tok = source.manifest.preprocessing.tokenizer_dir
        if tok:
            link_or_copy(source.path / tok, folder / TOKENIZER_DIR)
            manifest.preprocessing.tokenizer_dir = TOKENIZER_DIR
        manifest.id = self.name
        manifest.model_file = MODEL_FILE
        manifest.precision = self.precision if self.precision != "fp32" else manifest.precision
        manifest.passes.append(record)
        manifest.op_counts = op_counts(folder / MODEL_FILE)
        manifest.agreement = None
        manifest.libraries = {}
        self.update(manifest, ctx, record)
        return finalize(folder, manifest)

    def update(self, manifest: Manifest, ctx: PassContext, record: PassRecord) -> None:
        """Change manifest fields other than the graph (threads, preprocessing...)."""
