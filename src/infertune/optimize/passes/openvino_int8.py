"""OpenVINO INT8 by NNCF post-training quantization, with infertune's quality floor in the loop.

1. ``nncf.quantize`` (transformer preset) on the held-out inputs; the result is scored by the
   gate every variant faces (agreement with the baseline's outputs on the calibration inputs,
   ``QualityTarget.holds``). If it holds, every quantizable layer stays INT8.
2. Otherwise ``nncf.quantize_with_accuracy_control``, whose metric is that same mean cosine
   against the baseline and whose allowed drop is the distance from the f32 IR's score down to
   the floor: NNCF puts back the layers that cost the most agreement in f32 until it holds.
3. The result is scored again by the gate and every trial recorded; if the floor is still not
   met the variant is kept as the most accurate found, and optimize's quality gate judges it.

It derives from ``openvino_fp32``: the same IR, its shape choice (static buckets or dynamic,
measured there) and its thread settings; the compiled model's precision is read back.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from infertune.errors import NotApplicableError
from infertune.models.openvino_runner import OpenVinoSettings, OvRunner
from infertune.models.variant import Agreement, PassRecord
from infertune.optimize.passes.base import PassContext, PassSettings
from infertune.optimize.passes.facts import InPlan, PassFacts, Requires
from infertune.optimize.passes.openvino_common import (
    XML_FILE,
    OpenVinoCost,
    new_ir_folder,
    openvino_reason,
    read_back,
)
from infertune.optimize.passes.registry import register
from infertune.optimize.passes.variant_files import Variant, agreement, finalize, predict_rows
from infertune.serial import Serial

GATE_SLACK = 0.1  # share of the f32 IR's room above the floor that accuracy control keeps


@contextlib.contextmanager
def quiet_nncf() -> Iterator[None]:
    """NNCF draws progress bars and logs advice on every call; keep them out of infertune's
    output (errors still raise)."""
    import nncf

    nncf.set_log_level(logging.ERROR)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


@dataclass(frozen=True)
class OpenVinoInt8Settings(PassSettings):
    """The quantizers; the record adds, at build, each trial, the choice and the precision
    read back."""

    quantizer: str = "nncf.quantize, model_type=TRANSFORMER (mixed preset)"
    fallback: str = "nncf.quantize_with_accuracy_control on infertune's mean cosine"


@dataclass(frozen=True)
class NncfTrial(Serial):
    """One NNCF result scored by the gate on the calibration inputs."""

    trial: str
    fake_quantize: int
    mean_cosine: float
    min_cosine: float
    meets_floor: bool


@register("openvino_int8", facts=PassFacts(
    runtime="openvino", precision="int8", requires=Requires(
        libraries=("openvino", "nncf"), model_kinds=("text",)),
    cost=OpenVinoCost(int8=True), plans=(InPlan("text", "full", 12),),
    summary="NNCF INT8 of the OpenVINO IR, the quality floor in the loop"))
class OpenVinoInt8Pass:
    name = "openvino_int8"
    source: str | None = "openvino_fp32"
    fallback_source: str | None = None
    precision = "int8"

    def settings(self) -> OpenVinoInt8Settings:
        return OpenVinoInt8Settings()

    def applies(self, ctx: PassContext) -> str | None:
        reason = openvino_reason(ctx)
        if reason is None and not ctx.calibration:
            return "OpenVINO INT8 needs held-out inputs to calibrate on; pass --data"
        if reason is None and importlib.util.find_spec("nncf") is None:
            return "OpenVINO INT8 needs NNCF: pip install 'infertune[openvino]'"
        return reason

    def apply(self, source: Variant | None, ctx: PassContext) -> Variant:
        import openvino as ov

        if source is None or source.manifest.openvino is None:
            raise NotApplicableError(f"{self.name} needs the OpenVINO f32 variant")
        folder, manifest = new_ir_folder(source, ctx, self.name)
        record = PassRecord(self.name, self.settings().to_dict())
        settings = replace(source.manifest.openvino, precision_hint="f32")
        xml = source.path / source.manifest.model_file
        model = quantize_to_floor(ov.Core().read_model(str(xml)), xml, ctx, record)
        ov.save_model(model, str(folder / XML_FILE), compress_to_fp16=False)
        manifest.precision = read_back(OvRunner(str(folder / XML_FILE), settings), record,
                                       "int8")
        manifest.openvino = settings
        manifest.op_counts = {"FakeQuantize": fake_quantize_count(model)}
        manifest.passes.append(record)
        return finalize(folder, manifest)


def quantize_to_floor(model: Any, f32_xml: Path, ctx: PassContext, record: PassRecord) -> Any:
    import nncf

    inputs = ctx.calibration_inputs()
    feeds = [ctx.baseline.preprocess([x]) for x in inputs]
    trials: list[NncfTrial] = []
    with quiet_nncf():
        plain = nncf.quantize(model.clone(), nncf.Dataset(feeds),
                              model_type=nncf.ModelType.TRANSFORMER, subset_size=len(feeds))
    found = score_model(plain, ctx)
    trials.append(_trial("all quantizable layers INT8", plain, found, ctx))
    chosen, best = plain, found
    if not ctx.quality.holds(found):
        reference = ctx.reference("calibration")
        f32_score = score_model(model, ctx).mean_cosine
        # NNCF scores its candidates on its own compiled models, the gate on the saved IR: keep
        # a tenth of the room to the floor so a last-digit difference cannot fail the gate
        max_drop = max(0.0, (f32_score - ctx.quality.min_mean_cosine) * (1 - GATE_SLACK))
        validation = nncf.Dataset(list(enumerate(feeds)), lambda item: item[1])
        with quiet_nncf():
            controlled = nncf.quantize_with_accuracy_control(
                model.clone(), nncf.Dataset(feeds), validation,
                _validation_fn(ctx, reference), max_drop=max_drop,
                drop_type=nncf.DropType.ABSOLUTE, model_type=nncf.ModelType.TRANSFORMER,
                subset_size=len(feeds), advanced_quantization_parameters=_no_smooth_quant())
        found = score_model(controlled, ctx)
        trials.append(_trial(f"accuracy control: max drop {max_drop:.2e} from the f32 IR's "
                             f"{f32_score:.6f}", controlled, found, ctx))
        if ctx.quality.holds(found) or found.mean_cosine > best.mean_cosine:
            chosen, best = controlled, found
    meets = ctx.quality.holds(best)
    record.settings |= {
        "trials": [t.to_dict() for t in trials], "calibration_inputs": len(feeds),
        "choice": (f"first trial meeting {ctx.quality.describe()} on {len(feeds)} calibration "
                   "inputs" if meets else
                   f"no trial met {ctx.quality.describe()}; kept the most accurate")}
    return chosen


def _no_smooth_quant() -> Any:
    """SmoothQuant off for the accuracy-controlled run. With it on (NNCF 3.4.0, the test BERT
    with one outlier weight, a 0.99999 floor) the returned model had no FakeQuantize left and
    a mean cosine of 0.244: our reading is that reverting a layer to f32 restores its weights
    but not SmoothQuant's rescaling of its input. Off, it kept 5 of 12 quantizers and met it."""
    from nncf.quantization.advanced_parameters import (
        AdvancedQuantizationParameters,
        AdvancedSmoothQuantParameters,
    )

    return AdvancedQuantizationParameters(
        smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=-1))


def _trial(what: str, model: Any, found: Agreement, ctx: PassContext) -> NncfTrial:
    return NncfTrial(what, fake_quantize_count(model), round(found.mean_cosine, 6),
                     round(found.min_cosine, 6), ctx.quality.holds(found))


def fake_quantize_count(model: Any) -> int:
    return sum(op.get_type_name() == "FakeQuantize" for op in model.get_ordered_ops())


def score_model(model: Any, ctx: PassContext) -> Agreement:
    """The gate's agreement of an in-memory model with the baseline on the calibration inputs,
    run as a variant would run it (f32 hint; OvRunner loads it from a saved IR)."""
    import openvino as ov

    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / XML_FILE
        ov.save_model(model, str(xml), compress_to_fp16=False)
        runner = OvRunner(str(xml), OpenVinoSettings(precision_hint="f32", cache=False))
        adapter = ctx.baseline.with_runner(runner)
        return agreement(ctx.reference("calibration"),
                         predict_rows(adapter, ctx.calibration_inputs()))


def _validation_fn(ctx: PassContext, reference: np.ndarray) -> Any:
    """NNCF's metric: mean cosine of the compiled model's final outputs (the baseline's own
    postprocessing) against the baseline's, one value per calibration input."""

    def validate(compiled: Any, items: Iterable[tuple[int, dict[str, np.ndarray]]]
                 ) -> tuple[float, list[float]]:
        request = compiled.create_infer_request()
        scores = []
        for index, feeds in items:
            request.infer(feeds)
            raw = np.array(request.get_output_tensor(0).data, copy=True)
            row = np.asarray(ctx.baseline.postprocess(raw, feeds)[0], dtype=np.float64)
            ref = reference[index].astype(np.float64).reshape(-1)
            row = row.reshape(-1)
            denom = max(float(np.linalg.norm(ref) * np.linalg.norm(row)), 1e-30)
            scores.append(float(ref @ row) / denom)
        return float(np.mean(scores)), scores

    return validate
