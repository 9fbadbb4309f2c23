"""The build order by expected gain per second (optimize/search/ordering.py), on described machines
(VNNI, AVX2-only, ARM) and with injected step costs: never this machine's CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from cpu_profiles import profile_hardware

from infertune.hardware import HardwareInfo
from infertune.optimize.passes import create_pass
from infertune.optimize.search.builder import FULL_PASSES, registry
from infertune.optimize.search.costs import CostFacts, step_s
from infertune.optimize.search.ordering import (
    SearchPlan,
    expected_gain,
    int8_path,
    plan_order,
    prior,
)

CANDIDATES = [p for p in FULL_PASSES if p not in ("torch_fp32", "ort_fp32")]
# minilm-like measured times: a 15 ms call, 5 ms per input at batch 16, a 9 s export
MINILM = CostFacts(call_ms=15.0, item_ms=5.0, export_s=9.0, params_m=22.7, matmuls=48,
                   schemes=2)


def sources(name: str) -> list[str]:
    made = create_pass(name, registry())
    return [s for s in (made.source, made.fallback_source) if s is not None]


@pytest.fixture(scope="module")
def machines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HardwareInfo]:
    root = tmp_path_factory.mktemp("cpus")
    return {name: profile_hardware(name, root, cores=2)
            for name in ("zen4", "sapphire_rapids", "avx2", "graviton3")}


def order(hw: HardwareInfo, facts: CostFacts = MINILM) -> list[str]:
    plan = plan_order(CANDIDATES, hw, lambda n: step_s(n, facts), sources,
                      done=["torch_fp32", "ort_fp32"])
    return plan.names


def test_int8_path_follows_the_cpu(machines: dict[str, HardwareInfo]) -> None:
    assert [int8_path(machines[n]) for n in ("zen4", "sapphire_rapids", "avx2", "graviton3")] \
        == ["vnni", "vnni", "no-vnni", "arm-dot"]


@pytest.mark.parametrize("cpu", ["zen4", "sapphire_rapids", "graviton3"])
def test_int8_before_thread_variants_on_a_cpu_with_int8_dot_products(
        machines: dict[str, HardwareInfo], cpu: str) -> None:
    names = order(machines[cpu])
    int8 = names.index("ort_int8_dynamic_per_channel")
    for threads in ("ort_threads_cores_nospin", "ort_int8_threads_one",
                    "ort_int8_threads_cores_nospin"):
        assert int8 < names.index(threads), names
    # fusion is the source INT8 is built on: it comes first, planned for it
    assert names.index("ort_fused") < int8


def test_every_pass_is_planned_once_sources_first(machines: dict[str, HardwareInfo]) -> None:
    for hw in machines.values():
        names = order(hw)
        assert sorted(names) == sorted(CANDIDATES)
        for i, name in enumerate(names):
            for src in sources(name):
                assert src in ("ort_fp32", "torch_fp32") or names.index(src) < i


def test_vnni_expects_more_from_int8_than_avx2(machines: dict[str, HardwareInfo]) -> None:
    vnni = prior("ort_int8_dynamic_per_channel", machines["zen4"])
    avx2 = prior("ort_int8_dynamic_per_channel", machines["avx2"])
    assert vnni.speedup == pytest.approx(5.2)  # the knowledge base's VNNI measurement
    assert avx2.speedup == pytest.approx(2.72)
    assert "avx512_vnni" in vnni.source and "AVX2" in avx2.source
    # a fusion pass does not depend on the INT8 path
    assert prior("ort_fused", machines["zen4"]) == prior("ort_fused", machines["avx2"])


def test_a_costly_pass_waits_behind_a_cheap_one_of_some_promise(
        machines: dict[str, HardwareInfo]) -> None:
    """Measured costs change the order: make per-tensor INT8 cost 100x per-channel's and the
    mixed-precision search (one scoring per MatMul) goes after the cheap thread plans."""
    hw = machines["avx2"]

    def cost(name: str) -> float:
        return {"ort_int8_dynamic_per_tensor": 3000.0, "ort_int8_mixed": 5000.0}.get(name, 30.0)

    names = plan_order(CANDIDATES, hw, cost, sources, done=["ort_fp32"]).names
    assert names.index("ort_int8_threads_cores_nospin") < names.index("ort_int8_mixed")
    assert names.index("ort_int8_dynamic_per_tensor") > names.index("ort_threads_cores_nospin")
    same = plan_order(CANDIDATES, hw, lambda n: 30.0, sources, done=["ort_fp32"]).names
    assert same.index("ort_int8_dynamic_per_tensor") < same.index("ort_threads_cores_nospin")


def test_mixed_precision_cost_grows_with_the_graph_and_the_call_time() -> None:
    small = step_s("ort_int8_mixed", MINILM)
    big = step_s("ort_int8_mixed", CostFacts(call_ms=150.0, item_ms=60.0, export_s=40.0,
                                             params_m=110.0, matmuls=96, schemes=2))
    assert big > 5 * small
    assert step_s("ort_int8_threads_one", MINILM) < step_s("ort_int8_dynamic_per_channel",
                                                         MINILM)


def test_expected_gain_is_the_improvement_over_the_best_planned() -> None:
    p = prior("ort_fused", HardwareInfo(cpu_model="x", logical_cores=2, arch="x86_64"))
    assert expected_gain(p, 1.0) > expected_gain(p, 1.62) > expected_gain(p, 5.0) >= 0.0
    assert expected_gain(p, 50.0) < 1e-6  # nothing left to gain beyond a 50x variant
    # at best = 1 the gain is close to the median's saving, 1 - 1/1.62
    assert expected_gain(p, 1.0) == pytest.approx(1 - 1 / 1.62, abs=0.08)


def test_the_plan_round_trips_and_says_what_it_rests_on(
        machines: dict[str, HardwareInfo]) -> None:
    plan = plan_order(CANDIDATES, machines["zen4"], lambda n: step_s(n, MINILM), sources,
                      done=["ort_fp32"], basis=MINILM.basis)
    assert SearchPlan.from_dict(plan.to_dict()) == plan
    text = plan.describe()
    assert "INT8 path: vnni" in text and "ONNX export of 9 s, measured here" in text


def test_unknown_pass_gets_a_neutral_prior(tmp_path: Path) -> None:
    p = prior("ort_something_new", HardwareInfo(cpu_model="x", logical_cores=2))
    assert p.speedup == 1.0 and "no measurement" in p.source


def test_an_empty_plan_says_nothing_fitted() -> None:
    text = SearchPlan([], "no-vnni", MINILM.basis).describe()
    assert text.startswith("no pass was built beyond") and "measured here" in text
