"""Typed pass settings: every pass's ``settings()`` class writes exactly the dict the code
before it wrote, and the records old variant folders hold read back as their pass's class,
value for value. pass_records_old.json was captured by running that code: every registered
pass's settings(), and one record per pass from builds on the tiny BERT, the test MLP .onnx
and the OpenVINO passes (as conftest.py, test_passes_tensor_models.py and
test_passes_openvino.py build them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infertune.models.variant import Int8SchemeSettings, PassRecord
from infertune.optimize.passes import REGISTRY, create_pass
from infertune.optimize.passes.base import PassSettings
from infertune.optimize.passes.mixed_precision import MixedSettings
from infertune.optimize.passes.ort_fusion import FusionSettings, ProbeSettings
from infertune.optimize.passes.registry import settings_of

OLD: dict[str, Any] = json.loads((Path(__file__).parent / "pass_records_old.json").read_text())
# what the record holds beside its typed fields: facts no code reads back (the threads a plan
# gave, OpenVINO's read-back precision and timings), left as the pass wrote them
UNTYPED = {
    "ThreadPlanSettings": {"cpu_quota", "effective_cores", "inter_op", "intra_op",
                           "logical_cores", "spinning"},
    "OpenVinoConvertSettings": {"compute_precisions", "effective_cores_at_build", "num_streams",
                                "num_threads", "precision_property", "ran_precision",
                                "serve_rule", "shapes"},
    "OpenVinoInt8Settings": {"calibration_inputs", "choice", "compute_precisions",
                             "precision_hint", "precision_property", "ran_precision", "trials"},
}
# written only on a CPU that offers several INT8 schemes (no VNNI): the capture may lack them
CPU_DEPENDENT = {"scheme_trials", "scheme_choice"}


def test_every_registered_pass_was_captured() -> None:
    assert set(REGISTRY) == set(OLD["settings"])


@pytest.mark.parametrize("name", sorted(OLD["settings"]))
def test_settings_write_the_dict_the_old_code_wrote(name: str) -> None:
    settings = create_pass(name).settings()
    assert isinstance(settings, PassSettings) and type(settings) is not PassSettings
    assert type(settings) is REGISTRY.settings_type(name)
    assert json.loads(json.dumps(settings.to_dict())) == OLD["settings"][name]
    assert type(settings).from_dict(settings.to_dict()) == settings


@pytest.mark.parametrize("key", sorted(OLD["built"]))
def test_an_old_record_reads_back_as_its_pass_class(key: str) -> None:
    name = key.split(":")[1]
    data = OLD["built"][key]
    typed = settings_of(PassRecord(name, data))
    assert type(typed) is REGISTRY.settings_type(name)
    written = json.loads(json.dumps(typed.to_dict()))
    assert written == {k: data[k] for k in written}  # every typed field, exactly as written
    assert set(data) - set(written) == UNTYPED.get(type(typed).__name__, set())


def test_typed_readers_see_the_values_of_old_records() -> None:
    fused = settings_of(PassRecord("ort_fused", OLD["built"]["text:ort_fused"]))
    assert isinstance(fused, FusionSettings)
    assert isinstance(fused.skip_layernorm_probe, ProbeSettings)
    assert fused.skip_layernorm_fused == OLD["built"]["text:ort_fused"]["skip_layernorm_fused"]
    mixed_data = OLD["built"]["text:ort_int8_mixed"]
    mixed = settings_of(PassRecord("ort_int8_mixed", mixed_data))
    assert isinstance(mixed, MixedSettings)
    assert mixed.sensitivity == [tuple(row) for row in mixed_data["sensitivity"]]
    assert mixed.excluded == mixed_data["excluded"] and mixed.fp32_nodes == len(mixed.excluded)
    # the INT8 scheme serve reads is the part every INT8 pass shares
    for key in ("text:ort_int8_dynamic_per_channel", "text:ort_int8_static_minmax",
                "text:ort_int8_mixed", "tensor:ort_int8_dynamic_per_channel"):
        scheme = Int8SchemeSettings.from_dict(OLD["built"][key])
        assert (scheme.weight_type, scheme.reduce_range) == \
            (OLD["built"][key]["weight_type"], OLD["built"][key]["reduce_range"])
    assert Int8SchemeSettings.from_dict(OLD["built"]["text:ort_fused"]).weight_type is None


def test_a_pass_this_version_does_not_know_reads_as_the_base() -> None:
    assert settings_of(PassRecord("ort_retired_pass", {"anything": 1})) == PassSettings()


def test_new_builds_write_the_keys_old_builds_wrote(built_all) -> None:
    _, results = built_all
    for name, result in results.items():
        if not result.built:
            continue
        record = result.manifest.passes[-1]
        old = OLD["built"][f"text:{record.name}"]
        assert set(record.settings) - CPU_DEPENDENT == set(old) - CPU_DEPENDENT, name
        asked = OLD["settings"][record.name]  # keys; values as that build wrote them
        assert {k: record.settings[k] for k in asked} == {k: old[k] for k in asked}, name


def test_scheme_trials_write_what_the_old_dicts_held() -> None:
    from infertune.optimize.passes._onnx import Int8Scheme, SchemeTrial

    scheme = Int8Scheme("uint8", "int8", True, "no VNNI")
    # the old code: scheme.to_settings() | {"scheme_trials": [dicts], "scheme_choice": why}
    old_keys = {"activation_type": "uint8", "weight_type": "int8", "reduce_range": True,
                "scheme_reason": "no VNNI"}
    assert scheme.to_settings().to_dict() == old_keys
    trial = SchemeTrial(scheme.label, 0.993, 0.98, True)
    assert scheme.to_settings([trial], "first scheme meeting it").to_dict() == old_keys | {
        "scheme_trials": [{"scheme": "U8S8 reduce_range", "mean_cosine": 0.993,
                           "min_cosine": 0.98, "meets_floor": True}],
        "scheme_choice": "first scheme meeting it"}


def test_an_unfused_fp16_graph_still_writes_fused_for() -> None:
    from infertune.optimize.passes.ort_cuda_fp16 import Fp16Graph

    # the old dict always held "fused_for", null when no fusion pattern matched
    assert Fp16Graph({}, None, {"float16": 3}).to_dict() == {
        "gpu_fusion": {}, "fused_for": None, "initializers": {"float16": 3}}
