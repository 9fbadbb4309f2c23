"""benchmarks/gpu_check.py without a GPU: a described machine without one gets exit status 2
and the reason; ``--dry-run`` builds every GPU variant of a tiny BERT, runs it on the CPU and
prints the table, labelled as CPU timings, with each variant's agreement against fp32."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from infertune.hardware import HardwareInfo

ROOT = Path(__file__).resolve().parents[2]


def gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    return module


def test_without_a_gpu_it_exits_2_with_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    cpu_only = HardwareInfo(cpu_model="test cpu", logical_cores=2)
    assert gpu_check().main([], hardware=cpu_only) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu_check: no NVIDIA GPU on this machine (NVML lists none)")
    assert "--dry-run" in err


@pytest.mark.slow
@pytest.mark.timing_free  # its timings are printed, never asserted
def test_dry_run_builds_and_runs_every_gpu_variant_on_the_cpu(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "unit" / "optimize"))
    from optimize_tiny_helpers import make_tiny_bert

    model = make_tiny_bert(tmp_path / "bert")
    rows_file = tmp_path / "rows.json"
    cpu = HardwareInfo(cpu_model="test cpu", logical_cores=2, flags=["avx2"])
    status = gpu_check().main(["--dry-run", "--model", str(model), "--calls", "2",
                               "--warmup", "1", "--quality-n", "8", "--out", str(tmp_path / "v"),
                               "--json", str(rows_file)], hardware=cpu)
    out = capsys.readouterr().out
    assert status == 0
    assert "DRY RUN: no GPU used" in out and "not GPU figures" in out
    rows = {r["variant"]: r for r in json.loads(rows_file.read_text())}
    assert list(rows) == ["torch_fp32_eager", "ort_cuda_fp16", "ort_tensorrt_fp16",
                          "torch_fp16"]
    for name, row in rows.items():
        assert row["status"] == "measured", (name, row["reason"])
        assert set(row["p95_ms"]) == {"1", "16"}, name
        assert row["gpu_util_mean"] is None  # no device was read
    assert rows["ort_cuda_fp16"]["runs_on"] == "CPUExecutionProvider"
    assert rows["torch_fp16"]["runs_on"] == "torch cpu"
    for name in ("ort_cuda_fp16", "ort_tensorrt_fp16", "torch_fp16"):
        assert 0.999 < rows[name]["mean_cosine"] <= 1.0 + 1e-9, name
    # the TensorRT variant's profile was written from the held-out texts
    manifest = json.loads((tmp_path / "v" / "ort_tensorrt_fp16" / "manifest.json").read_text())
    assert manifest["gpu"]["profile"]["opt_shapes"]["input_ids"][0] == 16
