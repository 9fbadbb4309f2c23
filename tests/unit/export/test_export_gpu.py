"""Exports of GPU variants request the GPU: Triton KIND_GPU instances (the TensorRT settings as
the onnxruntime backend's accelerator, parsed with Triton's own ModelConfig schema) and the
``nvidia.com/gpu`` limit with the GPU nodes' toleration in the Kubernetes Deployment. A CPU
variant's exports carry neither."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml
from export_checks import model_config_class
from export_run import POLICY, make_run
from google.protobuf import text_format

from infertune.export.deploy_plan import plan
from infertune.export.kubernetes import write_kubernetes
from infertune.export.source import read_source
from infertune.export.triton import write_triton
from infertune.models.gpu import OrtGpuSettings, TrtProfile
from infertune.models.variant import MANIFEST, manifest_digest

VID = "ort_gpu"
NAMES = ("input_ids", "attention_mask", "token_type_ids")
PROFILE = TrtProfile(min_shapes={n: [1, 1] for n in NAMES},
                     opt_shapes={n: [8, 9] for n in NAMES},
                     max_shapes={n: [8, 12] for n in NAMES})


def _gpu_run(root: Path, gpu: OrtGpuSettings | None) -> Path:
    """The tiny text run, its variant's manifest given ``gpu`` and hashed again."""
    run = make_run(root, vid=VID)
    path = run / "variants" / VID / MANIFEST
    data = json.loads(path.read_text())
    data.pop("manifest_sha256")
    data["gpu"] = None if gpu is None else asdict(gpu)
    data["manifest_sha256"] = manifest_digest(data)
    path.write_text(json.dumps(data, indent=2))
    return run


def kind(name: str) -> int:
    """The number of an instance_group kind in Triton's ModelConfig schema."""
    group = model_config_class().DESCRIPTOR.fields_by_name["instance_group"].message_type
    return group.enum_types_by_name["Kind"].values_by_name[name].number


def _model_config(run: Path, out: Path) -> object:
    write_triton(plan(read_source(run)), out)
    text = (out / f"{VID}_model" / "config.pbtxt").read_text()
    return text_format.Parse(text, model_config_class()())


@pytest.mark.parametrize("provider", ["cuda", "tensorrt"])
def test_triton_runs_a_gpu_variant_on_gpu_instances(tmp_path: Path, provider: str) -> None:
    gpu = OrtGpuSettings(provider, profile=PROFILE if provider == "tensorrt" else None)
    config = _model_config(_gpu_run(tmp_path / "run", gpu), tmp_path / "triton")
    assert [(g.kind, g.count) for g in config.instance_group] == [
        (kind("KIND_GPU"), POLICY.workers)]
    accelerators = config.optimization.execution_accelerators.gpu_execution_accelerator
    if provider == "cuda":  # the onnxruntime backend runs KIND_GPU on CUDA by default
        assert list(accelerators) == []
        return
    [trt] = accelerators
    assert trt.name == "tensorrt"
    # the policy batches up to 16 (export_run.POLICY): the profile's max batch is widened to it
    assert dict(trt.parameters) == {
        "precision_mode": "FP16", "trt_layer_norm_fp32_fallback": "1",
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": "/tmp/infertune-tensorrt",
        "trt_profile_min_shapes": "input_ids:1x1,attention_mask:1x1,token_type_ids:1x1",
        "trt_profile_opt_shapes": "input_ids:8x9,attention_mask:8x9,token_type_ids:8x9",
        "trt_profile_max_shapes":
            "input_ids:16x12,attention_mask:16x12,token_type_ids:16x12"}


def test_the_tokenizer_and_postprocess_steps_stay_on_the_cpu(tmp_path: Path) -> None:
    run = _gpu_run(tmp_path / "run", OrtGpuSettings("cuda"))
    out = tmp_path / "triton"
    write_triton(plan(read_source(run)), out)
    for step in ("tokenize", "postprocess"):
        text = (out / f"{VID}_{step}" / "config.pbtxt").read_text()
        config = text_format.Parse(text, model_config_class()())
        assert [g.kind for g in config.instance_group] == [kind("KIND_CPU")], step


def test_a_cpu_variant_stays_on_cpu_instances(tmp_path: Path) -> None:
    text_run = _gpu_run(tmp_path / "run", None)
    out = tmp_path / "triton"
    write_triton(plan(read_source(text_run)), out)
    text = (out / f"{VID}_model" / "config.pbtxt").read_text()
    assert "KIND_CPU" in text and "KIND_GPU" not in text and "tensorrt" not in text


def _deployment(run: Path, out: Path) -> dict:
    write_kubernetes(plan(read_source(run)), out, image="registry.example/infertune:1")
    return yaml.safe_load((out / "deployment.yaml").read_text())


def test_kubernetes_requests_one_gpu_for_a_gpu_variant(tmp_path: Path) -> None:
    doc = _deployment(_gpu_run(tmp_path / "run", OrtGpuSettings("cuda")), tmp_path / "k8s")
    pod = doc["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "nvidia.com/gpu" not in container["resources"]["requests"]
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists",
                                   "effect": "NoSchedule"}]
    # the image the Deployment's comment asks for runs onnxruntime on the GPU
    written = (tmp_path / "k8s" / "deployment.yaml").read_text()
    assert "pip install 'infertune[serve,gpu]'" in written


def test_kubernetes_asks_no_gpu_for_a_cpu_variant(tmp_path: Path) -> None:
    doc = _deployment(_gpu_run(tmp_path / "run", None), tmp_path / "k8s")
    pod = doc["spec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in pod["containers"][0]["resources"]["limits"]
    assert "tolerations" not in pod
