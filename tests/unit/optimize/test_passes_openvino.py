"""OpenVINO variants on the tiny BERT: where they apply (described CPUs), the precision read back
from the compiled model, the shape choice, the folder round trip through models.load, NNCF
INT8 with the floor in the loop, and serve's stream sizing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from cpu_profiles import profile_hardware, this_cpu
from optimize_tiny_helpers import SENTENCES, hardware

from infertune.config import ServePolicy
from infertune.errors import ModelLoadError, NotApplicableError
from infertune.models import load
from infertune.models.openvino_runner import OpenVinoSettings, OvRunner, ran_precision
from infertune.models.variant import Manifest, PassRecord, read_manifest
from infertune.optimize import PassContext, QualityTarget, build_variants, create_pass
from infertune.optimize.passes.openvino_common import read_back
from infertune.optimize.passes.variant_files import finalize
from infertune.serve.worker_threads import fit_to_workers

pytest.importorskip("openvino")

NAMES = ("openvino_fp32", "openvino_bf16", "openvino_int8")
# the tiny BERT's matrix multiplies: 2 layers x (Q, K, V, attention output, FFN in, FFN out)
COMPUTE_LAYERS = 12
UNIQUE = SENTENCES[:8]  # SENTENCES is these 8, three times: builds time and calibrate on 8


@pytest.mark.parametrize("profile, reasons", [
    ("avx2", {"openvino_bf16": "needs AMX (amx_bf16) or avx512_bf16; this CPU has neither"}),
    ("zen4", {}),
    ("sapphire_rapids", {}),
    ("graviton3", {name: "used on x86-64 here; this machine is aarch64" for name in NAMES}),
])
def test_where_each_openvino_pass_applies(tiny_adapter, tmp_path, profile, reasons):
    hw = profile_hardware(profile, tmp_path)
    ctx = PassContext(tiny_adapter, hw, tmp_path / "out", SENTENCES)
    for name in NAMES:
        found = create_pass(name).applies(ctx)
        if name in reasons:
            assert found is not None and reasons[name] in found, (name, found)
        else:
            assert found is None, (name, found)


def test_int8_needs_held_out_inputs(tiny_adapter, tmp_path):
    ctx = PassContext(tiny_adapter, hardware(["avx2"]), tmp_path)
    assert create_pass("openvino_int8").applies(ctx) == (
        "OpenVINO INT8 needs held-out inputs to calibrate on; pass --data")


@pytest.mark.parametrize("precisions, hint, expected", [
    ({"f32": 12}, "f32", "fp32"),
    ({"bf16": 12}, "bf16", "bf16"),
    ({"f32": 9, "u8": 3}, "f32", "int8"),  # some layers kept in f32 by accuracy control
    ({"i8": 1, "u8": 11}, "f32", "int8"),
    ({"f32": 2, "bf16": 10}, "bf16", "bf16"),
    ({}, "bf16", "bf16"),
])
def test_the_precision_that_ran_is_named_from_the_compute_layers(precisions, hint, expected):
    assert ran_precision(precisions, hint) == expected


class _FakeRunner:
    settings = OpenVinoSettings(precision_hint="bf16")
    precision_property = "f32"
    precisions = {"f32": 12}
    precision = "fp32"


def test_a_variant_that_ran_another_precision_is_refused():
    record = PassRecord("openvino_bf16")
    with pytest.raises(NotApplicableError, match=r"asked OpenVINO for bf16 \(INFERENCE_PRECISION"
                       r"_HINT=bf16\); the compiled model runs its matrix multiplies in fp32"):
        read_back(_FakeRunner(), record, "bf16")  # type: ignore[arg-type]
    assert record.settings["ran_precision"] == "fp32"
    assert record.settings["compute_precisions"] == {"f32": 12}


def test_openvino_settings_round_trip_through_the_manifest():
    settings = OpenVinoSettings(precision_hint="bf16", num_threads=4, num_streams=2,
                                static_lengths=[16, 64], cache=False)
    manifest = Manifest(id="openvino_bf16", runtime="openvino", precision="bf16", kind="text",
                        task="embedding", model_file="model.xml", openvino=settings)
    again = Manifest.from_dict(manifest.to_dict())
    assert again.openvino == settings
    assert again == manifest
    assert settings.config(threads=8) == {"INFERENCE_PRECISION_HINT": "bf16",
                                          "NUM_STREAMS": "2", "INFERENCE_NUM_THREADS": "4"}
    assert OpenVinoSettings().config(threads=3)["INFERENCE_NUM_THREADS"] == "3"


# ------------------------------------------------------------------ built once on the tiny BERT


def _bf16_here() -> bool:
    return any(this_cpu().has(f) for f in ("amx_bf16", "avx512_bf16"))


@pytest.fixture(scope="module")
def built(tiny_adapter, tmp_path_factory):
    """The three passes on this machine's CPU (bf16 only where it is native: OpenVINO
    computes what the CPU has, and the precision is read back)."""
    ctx = PassContext(tiny_adapter, this_cpu(), tmp_path_factory.mktemp("ov"), UNIQUE,
                      quality=QualityTarget(min_mean_cosine=0.99), n_samples=len(UNIQUE))
    names = ["ort_fp32", *NAMES]
    return ctx, {r.pass_name: r for r in build_variants(tiny_adapter, ctx, names=names)}


@pytest.mark.slow
@pytest.mark.timing_free
def test_f32_variant_reads_back_f32_and_says_which_shapes_won(built):
    _, results = built
    result = results["openvino_fp32"]
    assert result.built, result.reason
    manifest = result.manifest
    assert (manifest.runtime, manifest.model_file, manifest.precision) == (
        "openvino", "model.xml", "fp32")
    settings = manifest.passes[-1].settings
    # set explicitly, so an AMX CPU cannot run it in bf16 behind the manifest's back
    assert settings["precision_hint"] == "f32"
    assert settings["compute_precisions"] == {"f32": COMPUTE_LAYERS}
    shapes = settings["shapes"]
    assert shapes["static_lengths"] == [16, 32, 64]  # the buckets up to max_length 64
    static_won = shapes["static"]["p95_ms"] < 0.95 * shapes["dynamic"]["p95_ms"]
    assert shapes["chosen"] == ("static" if static_won else "dynamic")
    assert manifest.openvino.static_lengths == ([16, 32, 64] if static_won else [])
    assert manifest.preprocessing.padding == ("bucket" if static_won else "longest")
    for kind in ("static", "dynamic"):
        assert shapes[kind]["calls"] == 2 * len(UNIQUE)
        assert shapes[kind]["empty_cache_s"] > 0 and shapes[kind]["warm_cache_s"] > 0
    assert {p.name for p in Path(result.path).iterdir()} == {
        "manifest.json", "model.xml", "model.bin", "tokenizer"}


@pytest.mark.slow
@pytest.mark.timing_free
def test_bf16_builds_only_where_the_cpu_has_it(built):
    _, results = built
    result = results["openvino_bf16"]
    if not _bf16_here():
        assert result.status == "skipped" and "needs AMX" in result.reason
        return
    assert result.built, result.reason
    settings = result.manifest.passes[-1].settings
    assert settings["compute_precisions"] == {"bf16": COMPUTE_LAYERS}
    assert result.manifest.precision == "bf16"
    assert result.manifest.agreement.mean_cosine > 0.999


@pytest.mark.slow
@pytest.mark.timing_free
def test_variant_folders_load_through_models_load(built):
    ctx, results = built
    reference = load(results["ort_fp32"].path).predict(SENTENCES[:8])
    for name in NAMES:
        if not results[name].built:
            continue
        adapter = load(results[name].path)
        assert isinstance(adapter.runner, OvRunner)
        assert adapter.info.runtime == "openvino"
        assert adapter.info.precision == results[name].manifest.precision  # read back at load
        out = adapter.predict(SENTENCES[:8])
        cosine = [float(np.dot(a, b)) for a, b in zip(out, reference, strict=True)]
        assert min(cosine) > 0.99, name


@pytest.mark.slow
@pytest.mark.timing_free
def test_static_buckets_pad_and_cut_back_to_what_dynamic_shapes_give(built):
    _, results = built
    xml = str(Path(results["openvino_fp32"].path) / "model.xml")
    dynamic = OvRunner(xml, OpenVinoSettings(cache=False))
    static = OvRunner(xml, OpenVinoSettings(cache=False, static_lengths=[16, 32]))
    base = load(results["ort_fp32"].path)  # padded to the longest input: 10 tokens
    feeds = base.preprocess(SENTENCES[:4])
    width = feeds["input_ids"].shape[1]
    assert width not in (16, 32)  # so the static runner pads it
    out_dynamic, out_static = dynamic(feeds), static(feeds)
    assert out_static.shape == out_dynamic.shape == (4, width, 32)
    mask = feeds["attention_mask"].astype(bool)
    np.testing.assert_allclose(out_static[mask], out_dynamic[mask], atol=1e-5)
    # wider than every static length: the dynamic model is compiled on first need
    wide = {k: np.pad(v, ((0, 0), (0, 40 - width)), constant_values=1) for k, v in feeds.items()}
    assert static(wide).shape == (4, 40, 32)
    assert None in static._models  # the dynamic fallback


@pytest.mark.slow
@pytest.mark.timing_free
def test_int8_is_nncf_quantized_and_judged_by_the_floor(built):
    _, results = built
    result = results["openvino_int8"]
    assert result.built, result.reason
    settings = result.manifest.passes[-1].settings
    assert result.manifest.precision == "int8"
    assert set(settings["compute_precisions"]) <= {"u8", "i8", "f32"}
    assert sum(n for p, n in settings["compute_precisions"].items() if p in ("u8", "i8")) > 0
    first = settings["trials"][0]
    assert first["trial"] == "all quantizable layers INT8"
    assert first["fake_quantize"] == result.manifest.op_counts["FakeQuantize"] > 0
    assert first["meets_floor"] is True  # the tiny BERT at 0.99: no fallback needed
    assert len(settings["trials"]) == 1
    assert result.manifest.agreement.mean_cosine >= 0.99
    assert result.manifest.openvino.precision_hint == "f32"
    assert result.manifest.openvino.static_lengths == \
        results["openvino_fp32"].manifest.openvino.static_lengths


@pytest.mark.slow
@pytest.mark.timing_free
def test_int8_falls_back_to_accuracy_control_under_a_strict_floor(tmp_path):
    from optimize_tiny_helpers import make_tiny_bert

    adapter = load(make_tiny_bert(tmp_path / "model", outlier=3.0), task="embedding")
    ctx = PassContext(adapter, hardware(["avx2", "avx512_vnni"]), tmp_path / "out", UNIQUE,
                      quality=QualityTarget(min_mean_cosine=0.99995), n_samples=len(UNIQUE))
    results = {r.pass_name: r for r in build_variants(adapter, ctx, names=["openvino_int8"])}
    result = results["openvino_int8"]
    assert result.built, result.reason
    trials = result.manifest.passes[-1].settings["trials"]
    if trials[0]["meets_floor"]:  # this CPU's INT8 kernels were accurate enough already
        assert len(trials) == 1
        return
    assert len(trials) == 2 and trials[1]["trial"].startswith("accuracy control")
    assert 0 < trials[1]["fake_quantize"] < trials[0]["fake_quantize"]
    assert trials[1]["meets_floor"] is True
    assert result.manifest.op_counts["FakeQuantize"] == trials[1]["fake_quantize"]


@pytest.mark.slow
@pytest.mark.timing_free
def test_serve_gives_each_worker_a_stream_and_its_share_of_the_cores(built):
    _, results = built
    adapter = load(results["openvino_fp32"].path)
    sized, threads = fit_to_workers(adapter, ServePolicy(workers=2), cores=4)
    assert threads == 2
    assert (sized.runner.settings.num_streams, sized.runner.settings.num_threads) == (2, 4)
    assert sized.runner.opened_with == {"intra_op_threads": 2, "streams": 2}
    alone, kept = fit_to_workers(adapter, ServePolicy(workers=1), cores=4)
    assert alone is adapter and kept is None


@pytest.mark.slow
@pytest.mark.timing_free
def test_a_model_openvino_cannot_read_is_a_load_error(built, tmp_path):
    import shutil

    _, results = built
    folder = tmp_path / "broken"
    shutil.copytree(results["openvino_fp32"].path, folder)
    (folder / "model.xml").write_text("<net>not an IR</net>")
    finalize(folder, replace(read_manifest(folder, verify=False), files={}))
    with pytest.raises(ModelLoadError, match=r"OpenVINO cannot load model.xml \(.*\); rebuild"):
        load(folder)


@pytest.mark.slow
@pytest.mark.timing_free
def test_serve_answers_with_the_openvino_variant(built):
    """`infertune serve`'s app on the variant folder, two workers sharing the OpenVINO model
    (one stream each): the HTTP answers are the adapter's own outputs."""
    from starlette.testclient import TestClient

    from infertune.serve import create_app

    _, results = built
    adapter = load(results["openvino_fp32"].path)
    sized, _ = fit_to_workers(adapter, ServePolicy(workers=2), cores=2)
    app = create_app(sized, ServePolicy(workers=2, max_wait_ms=1, max_batch_size=4))
    with TestClient(app) as client:
        answer = client.post("/v1/predict", json={"inputs": UNIQUE[:3]})
        assert answer.status_code == 200, answer.text
        got = np.asarray(answer.json()["outputs"])
        model = client.get("/v1/model").json()
    np.testing.assert_allclose(got, np.asarray(adapter.predict(UNIQUE[:3])), atol=1e-5)
    assert "openvino" in str(model)


class _ShapeLog:
    """The variant's runner, recording the batch size of every call."""

    def __init__(self, runner):
        self.inner, self.sizes = runner, []
        self.runtime, self.precision = runner.runtime, runner.precision
        self.input_names = runner.input_names

    def __call__(self, feeds):
        self.sizes.append(len(next(iter(feeds.values()))))
        return self.inner(feeds)


@pytest.mark.slow
@pytest.mark.timing_free
def test_serve_warms_every_batch_size_of_the_openvino_variant(built):
    """OpenVINO prepares each new input shape on its first call (serve/warmup.py), so serve's
    warm-up runs every batch size up to the maximum at each length, on worker threads and in
    worker processes alike."""
    import asyncio
    import time

    from infertune.serve.model_processes import ModelProcesses, ModelSource
    from infertune.serve.prometheus_metrics import ServeMetrics
    from infertune.serve.runtime import ServeRuntime
    from infertune.serve.warmup import shape_batches

    _, results = built
    path = results["openvino_fp32"].path
    adapter = load(path)
    logged = adapter.with_runner(_ShapeLog(adapter.runner))
    policy = ServePolicy(max_batch_size=4, cache_size=0, worker_kind="thread")

    async def serve_and_warm_processes() -> int:
        runtime = ServeRuntime(logged, policy, clock=time.monotonic, metrics=ServeMetrics())
        await runtime.start()
        while not runtime.ready and runtime.warmup_error is None:
            await asyncio.sleep(0.01)
        assert runtime.warmup_error is None
        await runtime.stop()
        processes = ModelProcesses(ModelSource(str(path), adapter.info.version), 2)
        await processes.start()
        try:
            return await processes.warm_shapes(shape_batches(adapter, 4), 60.0)
        finally:
            await processes.close()

    in_each_process = asyncio.run(serve_and_warm_processes())
    assert set(logged.runner.sizes) == {1, 2, 3, 4}
    assert in_each_process == len(shape_batches(adapter, 4)) > 0
