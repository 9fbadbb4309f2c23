"""The Triton repository: every config.pbtxt parses with Triton's own ModelConfig schema and
carries the run's measured policy; the Python-backend tokenizer and postprocessing, run here
under a stand-in for Triton's utilities, give the same arrays as the adapter."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from export_checks import Request, model_config_class
from export_run import CORES, SERVICE_P50_MS, make_run
from google.protobuf import text_format

from infertune.config import CLIENT_DEADLINE_FACTOR, ServePolicy
from infertune.errors import ConfigError
from infertune.export.deploy_plan import plan
from infertune.export.source import read_source
from infertune.export.triton import write_triton
from infertune.models.variant import load_variant
from infertune.report.schema import Report

VID = "ort_int8_dynamic_per_channel"
TEXTS = ["how do i reset my password", "the model was fast",
         "revenue grew costs stayed flat when users wait for every answer the report",
         "zzz unknown words", ""]


def _parse(path: Path) -> object:
    return text_format.Parse(path.read_text(), model_config_class()())


@pytest.fixture(scope="module")
def repo(text_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("triton")
    write_triton(plan(read_source(text_run)), out)
    return out


def test_configs_parse_with_tritons_schema_and_carry_the_measured_policy(
        repo: Path, text_run: Path) -> None:
    report = Report.load_json(text_run / "report.json")
    assert report.serving is not None
    policy = ServePolicy.model_validate(report.serving.policy)
    configs = {p.parent.name: _parse(p) for p in sorted(repo.glob("*/config.pbtxt"))}
    assert set(configs) == {VID, f"{VID}_model", f"{VID}_tokenize", f"{VID}_postprocess"}
    onnx = configs[f"{VID}_model"]
    assert onnx.backend == "onnxruntime" and onnx.name == f"{VID}_model"
    assert onnx.max_batch_size == policy.max_batch_size
    batching = onnx.dynamic_batching
    assert batching.max_queue_delay_microseconds == round(policy.max_wait_ms * 1000)
    assert list(batching.preferred_batch_size) == [policy.max_batch_size]
    queue = batching.default_queue_policy
    # the client deadline (10 x the loosest SLO target, 100 ms in scenario.yaml) minus the
    # measured p50 service time
    deadline_ms = CLIENT_DEADLINE_FACTOR * 100.0
    assert queue.default_timeout_microseconds == round((deadline_ms - SERVICE_P50_MS) * 1000)
    assert queue.max_queue_size == policy.max_queue
    assert queue.timeout_action == model_config_class()().dynamic_batching. \
        default_queue_policy.REJECT
    assert [(g.count, g.kind) for g in onnx.instance_group] == [
        (policy.workers, onnx.instance_group[0].KIND_CPU)]
    params = {k: v.string_value for k, v in onnx.parameters.items()}
    # the manifest leaves threads to the runtime (0): the measured cores shared by the workers
    assert params == {"intra_op_thread_count": str(CORES // policy.workers),
                      "inter_op_thread_count": "0"}
    assert [(i.name, list(i.dims)) for i in onnx.input] == [
        ("input_ids", [-1]), ("attention_mask", [-1]), ("token_type_ids", [-1])]
    assert [(o.name, list(o.dims)) for o in onnx.output] == [("last_hidden_state", [-1, 8])]
    ensemble = configs[VID]
    assert ensemble.platform == "ensemble" and [i.name for i in ensemble.input] == ["TEXT"]
    steps = [s.model_name for s in ensemble.ensemble_scheduling.step]
    assert steps == [f"{VID}_tokenize", f"{VID}_model", f"{VID}_postprocess"]
    assert (repo / f"{VID}_model" / "1" / "model.onnx").is_file()
    # every line with a number says where it came from
    for line in (repo / f"{VID}_model" / "config.pbtxt").read_text().splitlines():
        if any(c.isdigit() for c in line.split("#")[0]) and "name:" not in line:
            assert "#" in line, line


def test_the_tokenizer_step_matches_the_adapters_preprocessing(
        repo: Path, text_run: Path, load_python_model) -> None:
    adapter = load_variant(text_run / "variants" / VID)
    model = load_python_model(repo / f"{VID}_tokenize")
    texts = TEXTS[:4]
    batch = np.array([[t.encode()] for t in texts], dtype=object)  # TYPE_STRING [batch, 1]
    [response] = model.execute([Request(TEXT=batch)])
    assert response.error is None
    expected = adapter.preprocess(texts)
    assert set(response.outputs) == set(expected)
    for name, array in expected.items():
        np.testing.assert_array_equal(response.outputs[name], array, err_msg=name)
    # two requests in one call: each padded on its own, as the adapter pads each batch
    one, two = model.execute([Request(TEXT=batch[:1]), Request(TEXT=batch[2:3])])
    np.testing.assert_array_equal(one.outputs["input_ids"],
                                  adapter.preprocess(texts[:1])["input_ids"])
    np.testing.assert_array_equal(two.outputs["input_ids"],
                                  adapter.preprocess(texts[2:3])["input_ids"])
    assert two.outputs["input_ids"].shape[1] == 12  # truncated at the manifest's max_length


def test_bucket_padding_follows_the_manifest(tmp_path: Path, load_python_model) -> None:
    run = make_run(tmp_path, padding="bucket")
    write_triton(plan(read_source(run)), tmp_path / "repo")
    adapter = load_variant(run / "variants" / VID)
    model = load_python_model(tmp_path / "repo" / f"{VID}_tokenize")
    for texts in (TEXTS[:1], TEXTS[1:3], TEXTS[2:3]):
        batch = np.array([[t.encode()] for t in texts], dtype=object)
        [response] = model.execute([Request(TEXT=batch)])
        expected = adapter.preprocess(texts)
        assert response.outputs["input_ids"].shape[1] in (4, 8, 12)
        for name, array in expected.items():
            np.testing.assert_array_equal(response.outputs[name], array, err_msg=name)


def test_the_tokenizer_step_answers_bad_text_with_an_error(repo: Path, load_python_model) -> None:
    model = load_python_model(repo / f"{VID}_tokenize")
    bad = np.array([[b"fine"], [b"\xff\xfe not utf-8"]], dtype=object)
    [response] = model.execute([Request(TEXT=bad)])
    assert response.outputs == {}
    assert response.error.message == "TEXT[1] is not UTF-8 text; send UTF-8 encoded strings"
    [empty] = model.execute([Request(TEXT=np.zeros((0, 1), dtype=object))])
    assert empty.error.message == "TEXT is empty; send at least one string"


def test_the_postprocess_step_matches_the_adapter(repo: Path, text_run: Path,
                                                  load_python_model) -> None:
    adapter = load_variant(text_run / "variants" / VID)
    inputs = adapter.preprocess(TEXTS[:3])
    raw = adapter.forward(inputs)
    model = load_python_model(repo / f"{VID}_postprocess")
    assert json.loads((repo / f"{VID}_postprocess" / "1" / "postprocess.json").read_text())[
        "task"] == "embedding"
    [response] = model.execute([Request(OUTPUT_RAW=raw, attention_mask=inputs["attention_mask"])])
    np.testing.assert_allclose(response.outputs["OUTPUT"],
                               np.stack(adapter.postprocess(raw, inputs)), rtol=1e-6)


def test_a_tensor_model_is_one_onnx_model(tensor_run: Path, tmp_path: Path) -> None:
    written = write_triton(plan(read_source(tensor_run)), tmp_path)
    assert [p.parent.name for p in written] == ["ort_fp32"]
    config = _parse(written[0])
    assert [(i.name, list(i.dims)) for i in config.input] == [("x", [16])]
    assert [(o.name, list(o.dims)) for o in config.output] == [("y", [8])]
    # the manifest names its threads: they win over the cores / workers share
    assert config.parameters["intra_op_thread_count"].string_value == "1"


def test_a_torch_variant_is_refused_with_the_fix(text_run: Path, tmp_path: Path) -> None:
    p = plan(read_source(text_run))
    torch_manifest = type(p.source.manifest)(**{**p.source.manifest.__dict__,
                                                "runtime": "torch", "model_file": "hf"})
    src = type(p.source)(**{**p.source.__dict__, "manifest": torch_manifest})
    with pytest.raises(ConfigError, match=r"takes an onnxruntime variant \(model.onnx\): pass "
                       r"--variant with one of \['ort_int8_dynamic_per_channel'\]"):
        write_triton(type(p)(**{**p.__dict__, "source": src}), tmp_path)
