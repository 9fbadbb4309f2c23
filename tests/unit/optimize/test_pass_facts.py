"""The pass registry's facts (optimize/passes/facts.py, registry.py): where each pass applies on
described machines (never this one), the prior per hardware path with its source, and a pass
added in this test module that the plans, the build order, the costs and build_variants pick up
from its own registration, with no other edit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cpu_profiles import profile_hardware
from onnx_graphs import WIDTH, make_mlp

from infertune.errors import ConfigError
from infertune.hardware import GpuInfo, HardwareInfo
from infertune.models import load
from infertune.optimize.passes import REGISTRY, PassContext, build_variants, create_pass
from infertune.optimize.passes._onnx import OrtDerivedPass
from infertune.optimize.passes.facts import (
    CostFacts,
    InPlan,
    PassFacts,
    Prior,
    Priors,
    Requires,
    cpu_paths,
)
from infertune.optimize.passes.registry import Registry, as_registry
from infertune.optimize.search.builder import not_run, plan_passes, planned
from infertune.optimize.search.costs import build_s, step_s
from infertune.optimize.search.ordering import int8_path, plan_order, prior

MINILM = CostFacts(call_ms=15.0, item_ms=5.0, export_s=9.0, params_m=22.7, matmuls=48,
                   schemes=2)


@pytest.fixture(scope="module")
def machines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HardwareInfo]:
    root = tmp_path_factory.mktemp("cpus")
    found = {name: profile_hardware(name, root, cores=2)
             for name in ("avx2", "zen4", "sapphire_rapids")}
    t4 = GpuInfo("Tesla T4", 15.0, "550.54", "7.5")
    p100 = GpuInfo("Tesla P100", 16.0, "550.54", "6.0")
    a100 = GpuInfo("A100-SXM4-40GB", 40.0, "550.54", "8.0")
    found["t4_box"] = HardwareInfo("AMD EPYC 7B12", 4, flags=["avx2"], gpus=[t4],
                                   arch="x86_64")
    found["p100_box"] = HardwareInfo("AMD EPYC 7B12", 4, flags=["avx2"], gpus=[p100],
                                     arch="x86_64")
    found["a100_box"] = HardwareInfo("AMD EPYC 7B12", 4, flags=["avx2"], gpus=[a100],
                                     arch="x86_64")
    return found


def reason(name: str, hw: HardwareInfo, kind: str | None = "text") -> str | None:
    return REGISTRY.facts(name).reason(hw, kind)


def test_cpu_paths_most_specific_first(machines: dict[str, HardwareInfo]) -> None:
    assert [cpu_paths(machines[n]) for n in ("avx2", "zen4", "sapphire_rapids")] == \
        [("no-vnni",), ("vnni",), ("amx", "vnni")]
    assert int8_path(machines["sapphire_rapids"]) == "vnni"  # AMX runs the VNNI figures


def test_openvino_bf16_needs_native_bf16(machines: dict[str, HardwareInfo]) -> None:
    assert reason("openvino_bf16", machines["avx2"]) == (
        "needs AMX (amx_bf16) or avx512_bf16; this CPU (AMD EPYC 7B12) has none of amx_bf16, "
        "avx512_bf16")
    assert reason("openvino_bf16", machines["zen4"]) is None  # avx512_bf16 on the EPYC 9B14
    assert reason("openvino_bf16", machines["sapphire_rapids"]) is None
    assert reason("openvino_fp32", machines["avx2"]) is None
    assert reason("openvino_fp32", machines["avx2"], "tensor") == (
        "builds from text models; this is a tensor model")


def test_gpu_passes_need_the_gpu_they_declare(machines: dict[str, HardwareInfo]) -> None:
    assert reason("torch_fp16", machines["sapphire_rapids"]) == (
        "needs an NVIDIA GPU of compute capability 7+; this machine has no NVIDIA GPU")
    assert reason("torch_fp16", machines["p100_box"]) == (
        "needs an NVIDIA GPU of compute capability 7+; the best GPU here has compute 6")
    assert reason("torch_fp16", machines["t4_box"]) is None
    # bf16 in torch: the CPU's bf16 flags, or an Ampere GPU standing in for them
    assert reason("torch_bf16", machines["t4_box"]) is not None
    assert reason("torch_bf16", machines["a100_box"]) is None
    assert reason("torch_bf16", machines["zen4"]) is None
    assert reason("torch_bf16", machines["avx2"]) == (
        "needs avx512_bf16 or AMX (amx_bf16) or an NVIDIA GPU of compute capability 8+; this "
        "CPU (AMD EPYC 7B12) has none of avx512_bf16, amx_bf16 and no such GPU")


def test_onnxruntime_passes_apply_on_every_cpu(machines: dict[str, HardwareInfo]) -> None:
    for hw in machines.values():
        for name in ("ort_fp32", "ort_fused", "ort_int8_dynamic_per_channel",
                     "ort_int8_threads_one"):
            assert reason(name, hw) is None, (name, hw.cpu_model)
    assert reason("ort_fused", machines["avx2"], "tensor") is not None
    assert reason("ort_fp32", machines["avx2"], "tensor") is None


def test_priors_follow_the_hardware_path(machines: dict[str, HardwareInfo]) -> None:
    spr, zen4, avx2 = machines["sapphire_rapids"], machines["zen4"], machines["avx2"]
    # the Xeon with AMX has its own INT8 figure (issue 27's hand measurement); the thread
    # plan on INT8 has none there and falls back to VNNI's
    assert prior("ort_int8_dynamic_per_channel", spr).speedup == 2.91
    assert prior("ort_int8_dynamic_per_channel", zen4).speedup == pytest.approx(5.2)
    assert prior("ort_int8_threads_one", spr) == prior("ort_int8_threads_one", zen4)
    # OpenVINO bf16's figure was measured on the Xeon with AMX (issue 27) and nowhere else
    ov = prior("openvino_bf16", spr)
    assert ov.speedup == 1.30 and "AMX" in ov.source and ov.source.startswith("measured")
    assert prior("openvino_bf16", zen4).source.startswith("no measurement")
    assert prior("torch_bf16", spr).speedup == 0.74
    # static INT8 is derived from dynamic per-channel's figure on every path
    for hw in (spr, zen4, avx2):
        static = prior("ort_int8_static_minmax", hw)
        assert static.speedup == prior("ort_int8_dynamic_per_channel", hw).speedup
        assert static.p_quality == 0.5 and static.source.startswith("estimate: as dynamic")
    assert prior("torch_fp16", machines["t4_box"]).source.startswith("no measurement")


def test_unknown_names_list_the_choices() -> None:
    with pytest.raises(ConfigError, match="unknown pass 'ort_magic'; choose from .*ort_fp32"):
        create_pass("ort_magic")


def test_overriding_a_factory_keeps_the_facts() -> None:
    reg = REGISTRY | {"ort_int8_mixed": REGISTRY["ort_int8_mixed"]}
    assert isinstance(reg, Registry) and reg.facts("ort_int8_mixed") == \
        REGISTRY.facts("ort_int8_mixed")
    plain = as_registry({k: v for k, v in REGISTRY.items() if k != "ort_bucketed"})
    assert "ort_bucketed" not in plain
    assert plain.facts("ort_fused").option == "ort-fusion"
    assert plain.facts("ort_bucketed").runtime == "unknown"


# A pass declared here, as a new engine's module would declare it.
TOY = REGISTRY.copy()


@TOY.register("ort_toy_fast", facts=PassFacts(
    runtime="onnxruntime", precision="fp32",
    requires=Requires(libraries=("onnxruntime",), model_kinds=("tensor",)),
    priors=Priors({"vnni": Prior(20.0, 0.1, 1.0, "made up for this test")}),
    cost=type("FlatCost", (), {"build_s": lambda self, f: 7.5 + f.export})(),
    plans=(InPlan("tensor", "quick", 5),), summary="a copy of the export, said to be fast"))
class ToyPass(OrtDerivedPass):
    name = "ort_toy_fast"
    source = "ort_fp32"


def test_a_pass_registered_in_a_test_module_is_planned_ordered_costed_and_built(
        machines: dict[str, HardwareInfo], tmp_path: Path) -> None:
    assert "ort_toy_fast" not in REGISTRY  # the default registry is untouched
    assert planned("tensor", False, TOY)[-1] == "ort_toy_fast"
    chosen, _ = plan_passes(quick=True, budget_s=500, tensor=True, reg=TOY)
    assert "ort_toy_fast" in chosen and "ort_toy_fast" not in plan_passes(True, 500, True)[0]
    assert "ort_toy_fast" not in not_run("tensor", TOY)
    assert build_s("ort_toy_fast", MINILM, TOY) == 7.5 + 9.0

    def sources(name: str) -> list[str]:
        made = TOY.create(name)
        return [s for s in (made.source, made.fallback_source) if s is not None]

    zen4 = machines["zen4"]
    plan = plan_order(chosen, zen4, lambda n: step_s(n, MINILM, TOY), sources,
                      done=["ort_fp32"], registry=TOY)
    assert plan.names[0] == "ort_toy_fast"  # its 20x prior on VNNI puts it first
    assert plan.passes[0].source == "made up for this test"
    avx2_plan = plan_order(chosen, machines["avx2"], lambda n: step_s(n, MINILM, TOY),
                           sources, done=["ort_fp32"], registry=TOY)
    assert avx2_plan.names[0] != "ort_toy_fast"  # no figure on AVX2: a neutral prior

    model = make_mlp(tmp_path / "mlp.onnx")
    baseline = load(model)
    inputs = list(np.random.default_rng(1).standard_normal((8, WIDTH)).astype(np.float32))
    ctx = PassContext(baseline, zen4, tmp_path / "variants", inputs)
    results = {r.pass_name: r for r in build_variants(baseline, ctx, names=["ort_toy_fast"],
                                                      registry=TOY)}
    assert list(results) == ["ort_fp32", "ort_toy_fast"]
    assert results["ort_toy_fast"].built, results["ort_toy_fast"].reason
    assert results["ort_toy_fast"].manifest.agreement.max_abs_diff == 0.0


def test_build_variants_skips_a_pass_whose_declared_hardware_is_missing(
        machines: dict[str, HardwareInfo], tmp_path: Path) -> None:
    gated = REGISTRY.copy()
    gated.register("ort_toy_amx", facts=PassFacts(
        runtime="onnxruntime", precision="bf16", requires=Requires(cpu_flags_any=("amx_bf16",))
    ))(type("AmxToy", (OrtDerivedPass,), {"name": "ort_toy_amx", "source": "ort_fp32"}))
    baseline = load(make_mlp(tmp_path / "mlp.onnx"))
    ctx = PassContext(baseline, machines["zen4"], tmp_path / "variants",
                      list(np.zeros((4, WIDTH), dtype=np.float32)))
    results = {r.pass_name: r for r in build_variants(baseline, ctx, names=["ort_toy_amx"],
                                                      registry=gated)}
    assert results["ort_toy_amx"].status == "skipped"
    assert results["ort_toy_amx"].reason == (
        "needs AMX (amx_bf16); this CPU (AMD EPYC 9B14) has none of amx_bf16")
    assert not (tmp_path / "variants" / "ort_toy_amx").exists()


def test_full_batches_order_by_the_batch_16_figures(machines: dict[str, HardwareInfo]) -> None:
    spr, zen4 = machines["sapphire_rapids"], machines["zen4"]
    ov = REGISTRY.facts("openvino_bf16").prior(spr, batched=True)
    assert ov.speedup == pytest.approx(700 / 225) and ov.source.endswith(
        "batch-16 inputs/s over the baseline's")
    assert REGISTRY.facts("ort_int8_dynamic_per_channel").prior(spr, True).speedup == \
        pytest.approx(474 / 225)
    # no batch-16 figure on the VNNI EPYC: the batch-1 prior stands
    assert REGISTRY.facts("ort_int8_dynamic_per_channel").prior(zen4, True).speedup == \
        pytest.approx(5.2)
    names = ["ort_int8_dynamic_per_channel", "openvino_bf16"]

    def sources(name: str) -> list[str]:
        made = REGISTRY.create(name)
        return [s for s in (made.source, made.fallback_source) if s is not None]

    def first(hw: HardwareInfo, batched: bool) -> str:
        return plan_order(names, hw, lambda n: 10.0, sources, done=["ort_fp32", "ort_fused"],
                          batched=batched).names[0]

    assert first(spr, batched=False) == "ort_int8_dynamic_per_channel"
    assert first(spr, batched=True) == "openvino_bf16"
    assert first(zen4, batched=True) == "ort_int8_dynamic_per_channel"
