"""Knowledge base and hardware catalogue: data-driven applicability, one-line errors for unknown
hardware, and a new YAML entry picked up with no code change. Plus the generic ranking."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from infertune.config import HardwareFacts, load_scenario
from infertune.errors import ConfigError
from infertune.optimize.search.ranking import rank
from infertune.report.advisor import advise
from infertune.report.knowledge import (
    Context,
    HardwareCatalogue,
    default_dir,
    load_knowledge,
)

RERANKER = Path(__file__).resolve().parents[3] / "examples" / "scenarios" / "reranker-t4.yaml"


@pytest.fixture(scope="module")
def catalogue() -> HardwareCatalogue:
    return HardwareCatalogue.load()


def test_t4_has_fp16_tensor_cores_and_no_bf16(catalogue) -> None:
    hw = catalogue.resolve(HardwareFacts(gpu="NVIDIA T4", cpu="8 vCPU Intel Xeon Cascade Lake"))
    assert hw.gpu == "T4"
    assert {"gpu", "fp16_tensor_cores", "int8_tensor_cores"} <= hw.caps
    assert "bf16" not in hw.caps
    assert hw.cpu == "Intel Xeon Cascade Lake"
    assert {"avx512", "vnni"} <= hw.caps


def test_longest_gpu_name_wins_and_flags_in_cpu_text_are_read(catalogue) -> None:
    assert catalogue.resolve(HardwareFacts(gpu="A100 80GB")).gpu == "A100"
    assert catalogue.resolve(HardwareFacts(gpu="a10g")).gpu == "A10G"
    cpu = catalogue.resolve(HardwareFacts(cpu="2 vCPU AMD EPYC (avx512_vnni, avx512_bf16)",
                                          gpu="none"))
    assert cpu.gpu is None
    assert {"cpu", "avx512", "vnni", "cpu_bf16"} <= cpu.caps
    assert "gpu" not in cpu.caps
    assert "neon" in catalogue.resolve(HardwareFacts(cpu="AWS Graviton3")).caps


def test_unknown_gpu_or_cpu_is_assumed_and_the_assumption_says_how_to_correct_it(
        catalogue) -> None:
    hw = catalogue.resolve(HardwareFacts(gpu="T5"))
    (msg,) = hw.assumptions
    assert "\n" not in msg
    assert msg.startswith("GPU 'T5' is not in the catalogue: assumed a generic GPU with FP16 "
                          "tensor cores and no BF16, INT8 or FP8 (memory not stated)")
    assert "T4, V100," in msg and msg.endswith("or set deployment.hardware.accelerator: other "
                                               "to assume nothing")
    assert hw.caps == {"gpu", "fp16_tensor_cores"} and hw.gpu_memory_gb is None
    other = catalogue.resolve(HardwareFacts(gpu="T5", accelerator="other"))
    assert "gpu" in other.caps and "fp16_tensor_cores" not in other.caps
    assert other.assumptions == ()
    z80 = catalogue.resolve(HardwareFacts(cpu="Zilog Z80"))
    assert z80.cpu == "generic x86-64 CPU with AVX2" and z80.caps == {"cpu", "avx2"}
    assert z80.assumptions[0].startswith("CPU 'Zilog Z80' is of a family the catalogue")
    arm = catalogue.resolve(HardwareFacts(cpu="64-core aarch64 server"))
    assert arm.cpu == "generic ARM64 CPU with NEON" and "neon" in arm.caps
    flagged = catalogue.resolve(HardwareFacts(cpu="16 vCPU (avx512_bf16)"))
    assert {"avx512", "cpu_bf16"} <= flagged.caps  # flags written in the text still count
    known = catalogue.resolve(HardwareFacts(gpu="A10G", cpu="AMD EPYC"))
    assert known.assumptions == () and known.gpu_memory_gb == 24


def test_applicability_follows_the_data() -> None:
    kb = load_knowledge()
    ids = {e.id for e in kb.entries}
    assert {"dynamic-batching", "micro-batching", "continuous-batching", "embedding-cache",
            "kv-cache", "prefix-cache", "response-cache-shared", "structured-pruning",
            "int8-cpu", "fp16-gpu", "bf16", "distillation", "smaller-architecture",
            "ort-fusion", "tensorrt", "torch-compile", "bounded-queue", "request-priorities",
            "warm-pool", "isolation", "autoscale-queue", "cascade"} <= ids
    t4 = Context(family="transformer-encoder", task="reranking", framework="pytorch",
                 target="server", pattern="spiky",
                 caps=frozenset({"gpu", "fp16_tensor_cores", "int8_tensor_cores", "tensorrt"}))
    got = {e.id for e in kb.applicable(t4)}
    assert {"fp16-gpu", "dynamic-batching", "tensorrt", "bounded-queue"} <= got
    assert not got & {"bf16", "kv-cache", "prefix-cache", "continuous-batching", "int8-cpu",
                      "micro-batching"}


def test_a_new_yaml_entry_is_used_without_code(tmp_path) -> None:
    entry = {"entries": [{
        "id": "speculative-widget", "title": "Speculative widget", "category": "test",
        "applies": {"tasks": ["reranking"]}, "impact": {"p95": [0.9, 0.95]},
        "effort": {"level": "low", "reason": "a setting"},
        "risk": {"level": "low", "reason": "none known"},
        "verify": "A/B it", "invalidated_by": "nothing", "source": "estimate: test entry"}]}
    (tmp_path / "extra.yaml").write_text(yaml.safe_dump(entry))
    kb = load_knowledge([default_dir(), tmp_path])
    report = advise(load_scenario(RERANKER), knowledge=kb)
    assert report.options[0].id == "speculative-widget"
    fig = report.options[0].impact.p95
    assert (fig.low, fig.high, fig.source) == (-95.0, -90.0, "estimate")
    assert "test entry" in fig.basis


def test_malformed_or_duplicate_entries_are_clear_errors(tmp_path) -> None:
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"entries": [{"id": "x", "title": "t"}]}))
    with pytest.raises(ConfigError, match=r"bad.yaml: entry 1: category"):
        load_knowledge([tmp_path])
    (tmp_path / "bad.yaml").unlink()
    with pytest.raises(ConfigError, match="appears twice"):
        load_knowledge([default_dir(), default_dir()])


def test_rank_is_impact_per_effort_within_risk_budget() -> None:
    items = [("big-hard", 40, "high", "low"), ("small-easy", 15, "low", "low"),
             ("huge-risky", 90, "low", "high"), ("mid", 30, "medium", "medium")]
    ranked = rank(items, impact=lambda t: t[1], effort=lambda t: t[2], risk=lambda t: t[3],
                  risk_budget="medium")
    assert [r.item[0] for r in ranked] == ["small-easy", "mid", "big-hard", "huge-risky"]
    assert [r.score for r in ranked] == [15.0, 15.0, 10.0, 90.0]
    assert [r.within_risk_budget for r in ranked] == [True, True, True, False]
