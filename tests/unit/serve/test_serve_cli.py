"""`infertune serve` argument handling: run folders, policy layering, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_fixture import report_dict

from infertune.cli import main
from infertune.cli.serving import build_policy, policy_layer, resolve_target
from infertune.config import ServePolicy
from infertune.errors import ConfigError


def _run_folder(tmp_path: Path, report: dict) -> Path:
    run = tmp_path / "runs" / "demo"
    (run / "variants" / "onnx-int8").mkdir(parents=True)
    (run / "report.json").write_text(json.dumps(report_dict(**report)))
    return run


def test_run_folder_serves_the_recommended_variant_with_its_policy(tmp_path: Path) -> None:
    run = _run_folder(tmp_path, {
        "recommendation": {"variant_id": "onnx-int8"},
        "serving": {"policy": {"max_batch_size": 16, "max_wait_ms": 4.0}},
    })
    ref, policy = resolve_target(str(run))
    assert ref == str(run / "variants" / "onnx-int8")
    assert policy.model_dump(exclude_unset=True) == {"max_batch_size": 16, "max_wait_ms": 4.0}
    ref, policy = resolve_target("minilm")
    assert (ref, policy.model_dump(exclude_unset=True)) == ("minilm", {})


def test_run_folder_deadline_defaults_to_the_scenario_slo(tmp_path: Path) -> None:
    run = _run_folder(tmp_path, {"recommendation": {"variant_id": "onnx-int8"},
                                 "serving": {"policy": {"max_batch_size": 4}}})
    (run / "scenario.yaml").write_text("slo: {p95_ms: 15, p99_ms: 30}\n")
    assert resolve_target(str(run))[1].model_dump(exclude_unset=True) == {
        "max_batch_size": 4, "timeout_ms": 300.0}
    explicit = _run_folder(tmp_path / "x", {"recommendation": {"variant_id": "onnx-int8"},
                                            "serving": {"policy": {"timeout_ms": 50}}})
    (explicit / "scenario.yaml").write_text("slo: {p99_ms: 30}\n")
    assert resolve_target(str(explicit))[1].model_dump(exclude_unset=True) == {"timeout_ms": 50}


def test_run_folder_errors_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="recommendation.variant_id"):
        resolve_target(str(_run_folder(tmp_path / "a", {"serving": {}})))
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_target(str(_run_folder(tmp_path / "b", {"recommendation": {"variant_id": "x"}})))
    with pytest.raises(ConfigError, match="recommends keeping the baseline model"):
        resolve_target(str(_run_folder(tmp_path / "c",
                                       {"recommendation": {"variant_id": None}})))


def test_policy_layers_report_then_file_then_flags(tmp_path: Path) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text("max_batch_size: 32\nmax_queue: 64\ncache_size: 10\n")
    policy = build_policy(ServePolicy(max_batch_size=16, max_wait_ms=4.0), config,
                          policy_layer({"max_queue": 8, "max_wait_ms": None}))
    assert (policy.max_batch_size, policy.max_wait_ms, policy.max_queue, policy.cache_size) == (
        32, 4.0, 8, 10)
    config.write_text("max_batch: 3\n")
    with pytest.raises(ConfigError, match="unknown serving policy field 'max_batch'"):
        build_policy(ServePolicy(), config, ServePolicy())
    with pytest.raises(ConfigError, match="max_batch_size = 0"):
        policy_layer({"max_batch_size": 0})
    config.write_text("worker_kind: fibers\n")
    with pytest.raises(ConfigError, match="worker_kind = 'fibers'.*'auto', 'thread' or 'process'"):
        build_policy(ServePolicy(), config, ServePolicy())
    with pytest.raises(ConfigError, match="not found"):
        build_policy(ServePolicy(), tmp_path / "missing.yaml", ServePolicy())


def test_cli_reports_a_missing_model_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "no/such/model", "--port", "0"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: model 'no/such/model' not found") and "\n" not in err


def test_torch_threads_are_sized_to_cores_per_worker() -> None:
    import torch

    from infertune.cli.serving import size_model_threads

    class Info:
        runtime = "torch"

    class Fake:
        info = Info()

    before = torch.get_num_threads()
    try:
        fake = Fake()
        assert size_model_threads(fake, ServePolicy(workers=2), cores=2) == (fake, 1)
        assert torch.get_num_threads() == 1
        assert size_model_threads(fake, ServePolicy(workers=1), cores=4)[1] == 4
        assert size_model_threads(fake, ServePolicy(workers=4, model_threads=2), cores=2)[1] == 2
        Info.runtime = "onnxruntime"  # no runner it could reopen: left as it is
        assert size_model_threads(fake, ServePolicy(workers=2), cores=2) == (fake, None)
    finally:
        torch.set_num_threads(before)



def test_a_public_bind_without_a_key_refuses_to_start(capsys) -> None:
    code = main(["serve", "minilm", "--host", "0.0.0.0"])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "refusing to serve on 0.0.0.0 without an API key" in err
    assert "--insecure-no-auth" in err and "--api-key-env" in err


def test_exposure_rules() -> None:
    from infertune.cli.serving import exposure_warnings

    open_policy, keyed = ServePolicy(), ServePolicy(api_key_env="K")
    for loopback in ("127.0.0.1", "localhost", "::1", "[::1]", "127.8.9.1"):
        assert exposure_warnings(loopback, open_policy, insecure_no_auth=False) == []
    for public in ("0.0.0.0", "::", "10.0.0.5", "my-host.example"):
        assert exposure_warnings(public, keyed, insecure_no_auth=False) == []
        with pytest.raises(ConfigError, match="--insecure-no-auth"):
            exposure_warnings(public, open_policy, insecure_no_auth=False)
        [warning] = exposure_warnings(public, open_policy, insecure_no_auth=True)
        assert public in warning and "no API key" in warning


def test_serve_help_states_the_default_overload_bound(capsys) -> None:
    main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "max(50 ms, max_wait_ms + 3 x the measured full-batch service time)" in text
    assert "--insecure-no-auth" in text and "--timeout-ms" in text


def test_keep_cores_awake_from_serve_yaml_or_the_flag(tmp_path: Path, capsys) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text("keep_cores_awake: true\n")
    unset, on = policy_layer({"keep_cores_awake": None}), policy_layer({"keep_cores_awake": True})
    assert build_policy(ServePolicy(), config, unset).keep_cores_awake
    assert build_policy(ServePolicy(), None, on).keep_cores_awake
    assert not build_policy(ServePolicy(), None, ServePolicy()).keep_cores_awake  # default off
    config.write_text("keep_cores_awake: sometimes\n")
    with pytest.raises(ConfigError, match="keep_cores_awake"):
        build_policy(ServePolicy(), config, ServePolicy())
    main(["serve", "--help"])
    assert "--keep-cores-awake" in capsys.readouterr().out
