"""The model step of a Triton repository for an OpenVINO variant: model.xml/.bin on Triton's
OpenVINO backend (``backend: "openvino"``), batched by the run's policy like the onnxruntime
step (export/triton.py writes the tokenizer, postprocessing and ensemble around it).

The backend's parameters (its README): ``NUM_STREAMS``, ``INFERENCE_NUM_THREADS`` (across all
streams) and ``HINT_BF16``. The instances of one model share its compiled model, so the
streams are the instance count and the threads the instances' share of the cores each.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from infertune.errors import ConfigError
from infertune.export.deploy_plan import DeployPlan

# OpenVINO element type names -> Triton data types
OV_TO_TRITON = {"f32": "TYPE_FP32", "f16": "TYPE_FP16", "bf16": "TYPE_BF16", "i64": "TYPE_INT64",
                "i32": "TYPE_INT32", "i8": "TYPE_INT8", "u8": "TYPE_UINT8", "boolean": "TYPE_BOOL"}


def openvino_io(xml: Path) -> tuple[list[tuple[str, str, list[int]]],
                                    list[tuple[str, str, list[int]]]]:
    """(name, Triton type, dims without the batch axis) of the IR's inputs and outputs; the
    batch axis must be dynamic for Triton's dynamic batching."""
    # openvino is the openvino extra's, imported here so the CLI starts without it
    try:
        import openvino as ov
    except ImportError as exc:
        raise ConfigError("exporting an OpenVINO variant reads its model.xml with OpenVINO; "
                          "pip install 'infertune[openvino]'") from exc
    model = ov.Core().read_model(str(xml))

    def tensors(ports: list[object]) -> list[tuple[str, str, list[int]]]:
        found = []
        for port in ports:
            name = port.get_any_name()  # type: ignore[attr-defined]
            shape = port.get_partial_shape()  # type: ignore[attr-defined]
            dims = [d.get_length() if d.is_static else -1 for d in shape]
            kind = port.get_element_type().get_type_name()  # type: ignore[attr-defined]
            if not dims or dims[0] != -1:
                raise ConfigError(f"{xml}: {name!r} has no dynamic batch axis; Triton's dynamic "
                                  "batching needs one (rebuild the variant)")
            if kind not in OV_TO_TRITON:
                raise ConfigError(f"{xml}: {name!r} has OpenVINO type {kind}, which Triton "
                                  "does not take")
            found.append((name, OV_TO_TRITON[kind], dims[1:]))
        return found

    return tensors(list(model.inputs)), tensors(list(model.outputs))


def openvino_parameters(p: DeployPlan) -> list[str]:
    """The backend's parameters lines, each with where its value comes from."""
    m = p.source.manifest
    settings = m.openvino
    if settings is None:
        raise ConfigError(f"variant {m.id!r} names runtime openvino but has no openvino "
                          "settings in its manifest; rebuild it with infertune optimize")
    streams, per = p.workers.value, p.intra_op_threads.value
    lines = [_param("NUM_STREAMS", str(streams),
                    f"one stream per model instance ({p.workers.source})")]
    if per > 0:
        lines.append(_param("INFERENCE_NUM_THREADS", str(per * streams),
                            f"{streams} streams x {per} threads ({p.intra_op_threads.source})"))
    if settings.precision_hint == "bf16":
        lines.append(_param("HINT_BF16", "YES", f"variants/{m.id}/manifest.json "
                            f"openvino.precision_hint = bf16 (ran {m.precision} at build)"))
    else:
        lines.append(f"# variants/{m.id} ran {m.precision} at build with INFERENCE_PRECISION_HINT="
                     f"{settings.precision_hint}. The backend has no f32 setting: on a CPU with "
                     "AMX OpenVINO runs f32 models in bf16 by default, so check the agreement "
                     "there.")
    if settings.static_lengths:
        lines.append(f"# The build measured static sequence lengths {settings.static_lengths} "
                     "faster than dynamic shapes; the backend takes one shape range, so the "
                     "tokenizer step pads to those lengths (bucket padding) and OpenVINO sees "
                     "only them.")
    return lines


def _param(key: str, value: str, source: str) -> str:
    return (f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}  # '
            + " ".join(source.split()))


def write_openvino_model(p: DeployPlan, folder: Path, config: str) -> Path:
    """Copy model.xml/.bin into ``folder/1`` and write ``config``."""
    m = p.source.manifest
    (folder / "1").mkdir(parents=True, exist_ok=True)
    xml = p.source.variant_dir / m.model_file
    for src in (xml, xml.with_suffix(".bin")):
        shutil.copy2(src, folder / "1" / ("model" + src.suffix))
    path = folder / "config.pbtxt"
    path.write_text(config)
    return path
