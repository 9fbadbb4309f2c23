"""The Triton export of an OpenVINO variant: the model step on Triton's OpenVINO backend
(model.xml/.bin, one stream per instance, the threads the run's rule gives), parsed with
Triton's own ModelConfig schema; the Kubernetes image names the engine's extra."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from export_checks import model_config_class
from export_run import CORES, POLICY, make_run
from google.protobuf import text_format

from infertune.export.deploy_plan import plan
from infertune.export.kubernetes import deployment
from infertune.export.source import read_source
from infertune.export.triton import write_triton
from infertune.models.openvino_runner import OpenVinoSettings, convert_onnx
from infertune.models.variant import Manifest, manifest_digest, sha256_file

pytest.importorskip("openvino")


def openvino_run(root: Path, vid: str, hint: str, static: list[int]) -> Path:
    """The fixture run with its variant converted to OpenVINO IR and its manifest saying so."""
    run = make_run(root, vid=vid)
    folder = run / "variants" / vid
    convert_onnx(folder / "model.onnx", folder / "model.xml")
    (folder / "model.onnx").unlink()
    data = json.loads((folder / "manifest.json").read_text())
    manifest = Manifest.from_dict(data)
    manifest.runtime, manifest.model_file = "openvino", "model.xml"
    manifest.precision = "bf16" if hint == "bf16" else "fp32"
    manifest.openvino = OpenVinoSettings(precision_hint=hint,  # type: ignore[arg-type]
                                         static_lengths=static)
    manifest.files = {str(p.relative_to(folder)): sha256_file(p)
                      for p in sorted(folder.rglob("*")) if p.is_file() and p.name !=
                      "manifest.json"}
    out = manifest.to_dict()
    out["manifest_sha256"] = manifest_digest(out)
    (folder / "manifest.json").write_text(json.dumps(out, indent=2))
    return run


def _parse(path: Path) -> object:
    return text_format.Parse(path.read_text(), model_config_class()())


def test_the_model_step_runs_on_the_openvino_backend(tmp_path: Path) -> None:
    vid = "openvino_fp32"
    run = openvino_run(tmp_path, vid, "f32", [])
    written = write_triton(plan(read_source(run)), tmp_path / "repo")
    assert [p.parent.name for p in written] == [
        f"{vid}_model", f"{vid}_tokenize", f"{vid}_postprocess", vid]
    model_dir = tmp_path / "repo" / f"{vid}_model"
    config = _parse(model_dir / "config.pbtxt")
    assert config.backend == "openvino"  # type: ignore[attr-defined]
    assert config.default_model_filename == "model.xml"  # type: ignore[attr-defined]
    assert sorted(p.name for p in (model_dir / "1").iterdir()) == ["model.bin", "model.xml"]
    params = {k: v.string_value for k, v in config.parameters.items()}  # type: ignore[attr-defined]
    # one stream per instance (worker), each on the cores // workers share
    per = CORES // POLICY.workers
    assert params == {"NUM_STREAMS": str(POLICY.workers),
                      "INFERENCE_NUM_THREADS": str(per * POLICY.workers)}
    assert [(i.name, list(i.dims)) for i in config.input] == [  # type: ignore[attr-defined]
        ("input_ids", [-1]), ("attention_mask", [-1]), ("token_type_ids", [-1])]
    assert [(o.name, list(o.dims)) for o in config.output] == [  # type: ignore[attr-defined]
        ("last_hidden_state", [-1, 8])]
    assert config.max_batch_size == POLICY.max_batch_size  # type: ignore[attr-defined]
    text = (model_dir / "config.pbtxt").read_text()
    assert "no f32 setting: on a CPU with AMX" in text
    ensemble = _parse(tmp_path / "repo" / vid / "config.pbtxt")
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == [  # type: ignore
        f"{vid}_tokenize", f"{vid}_model", f"{vid}_postprocess"]


def test_bf16_asks_the_backend_for_bf16_and_static_shapes_are_explained(tmp_path: Path) -> None:
    vid = "openvino_bf16"
    run = openvino_run(tmp_path, vid, "bf16", [4, 8, 12])
    write_triton(plan(read_source(run)), tmp_path / "repo")
    path = tmp_path / "repo" / f"{vid}_model" / "config.pbtxt"
    config = _parse(path)
    assert config.parameters["HINT_BF16"].string_value == "YES"  # type: ignore[attr-defined]
    assert "static sequence lengths [4, 8, 12]" in path.read_text()


def test_the_kubernetes_image_names_the_engine(tmp_path: Path) -> None:
    run = openvino_run(tmp_path, "openvino_fp32", "f32", [])
    container = deployment(plan(read_source(run)), "registry.example/infertune:1")
    image = container["spec"]["template"]["spec"]["containers"][0]["image"]  # type: ignore
    assert "pip install 'infertune[serve,openvino]'" in image.source


def test_an_openvino_manifest_without_its_settings_is_refused_with_the_fix(tmp_path: Path) -> None:
    from infertune.errors import ConfigError

    run = openvino_run(tmp_path, "openvino_fp32", "f32", [])
    p = plan(read_source(run))
    bare = type(p.source.manifest)(**{**p.source.manifest.__dict__, "openvino": None})
    src = type(p.source)(**{**p.source.__dict__, "manifest": bare})
    with pytest.raises(ConfigError, match=r"names runtime openvino but has no openvino settings "
                       r"in its manifest; rebuild it with infertune optimize"):
        write_triton(type(p)(**{**p.__dict__, "source": src}), tmp_path / "repo")
