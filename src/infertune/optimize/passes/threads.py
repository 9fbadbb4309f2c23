"""Session thread settings sized from the cgroup CPU quota (hardware.effective_cores), not
the host's core count: a container allowed 2 CPUs on a 64-core host that starts 64 threads
spends its quota on contention.

Plans: "one" (1 intra-op thread: the most concurrent requests per CPU), "cores" (one
intra-op thread per effective core, spinning on: lowest single-request latency), and
"cores_nospin" (same without spinning: idle workers stop burning quota between requests)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from infertune.models.variant import Manifest, PassRecord
from infertune.optimize.passes._onnx import ORT, OrtDerivedPass
from infertune.optimize.passes._priors import avx2_measured, int8_priors
from infertune.optimize.passes.base import PassContext, PassSettings
from infertune.optimize.passes.facts import InPlan, PassFacts, SettingCost
from infertune.optimize.passes.registry import register

Plan = Literal["one", "cores", "cores_nospin"]


@dataclass(frozen=True)
class ThreadPlanSettings(PassSettings):
    """The plan asked for; the record adds the threads it gave on this machine (intra_op,
    inter_op, spinning, effective_cores, cpu_quota, logical_cores: manifest.threads holds the
    ones a load applies)."""

    plan: Plan


@register("ort_threads_one", plan="one", facts=PassFacts(
    runtime="onnxruntime", precision="fp32", requires=ORT, cost=SettingCost(),
    summary="the fused graph on one intra-op thread"))
@register("ort_threads_cores", plan="cores", facts=PassFacts(
    runtime="onnxruntime", precision="fp32", requires=ORT, cost=SettingCost(),
    summary="the fused graph on every usable core, spinning"))
@register("ort_threads_cores_nospin", plan="cores_nospin", facts=PassFacts(
    runtime="onnxruntime", precision="fp32", requires=ORT, priors=avx2_measured(1.24, 1.0),
    cost=SettingCost(), plans=(InPlan("text", "full", 9), InPlan("tensor", "full", 4)),
    summary="the fused graph on every usable core, without spinning"))
class OrtThreadsPass(OrtDerivedPass):
    source: str | None = "ort_fused"
    fallback_source: str | None = "ort_fp32"

    def __init__(self, plan: Plan = "cores") -> None:
        self.plan = plan
        self.name = f"ort_threads_{plan}"

    def settings(self) -> ThreadPlanSettings:
        return ThreadPlanSettings(self.plan)

    def applies(self, ctx: PassContext) -> str | None:
        if self.plan != "one" and ctx.hardware.effective_cores <= 1:
            return "only 1 effective core (cgroup quota); ort_threads_one covers it"
        return None

    def update(self, manifest: Manifest, ctx: PassContext, record: PassRecord) -> None:
        cores = max(1, ctx.hardware.effective_cores)
        intra = 1 if self.plan == "one" else cores
        manifest.threads.intra_op = intra
        manifest.threads.inter_op = 1  # encoders are one chain of ops: no parallel branches
        manifest.threads.spinning = self.plan == "cores"
        record.settings |= {"intra_op": intra, "inter_op": 1,
                            "spinning": manifest.threads.spinning,
                            "effective_cores": ctx.hardware.effective_cores,
                            "cpu_quota": ctx.hardware.cpu_quota,
                            "logical_cores": ctx.hardware.logical_cores}


@register("ort_int8_threads_one", plan="one", facts=PassFacts(
    runtime="onnxruntime", precision="int8", requires=ORT, priors=int8_priors(1.10, 0.8),
    cost=SettingCost(), plans=(InPlan("text", "quick", 4), InPlan("tensor", "full", 3)),
    summary="per-channel INT8 on one intra-op thread"))
@register("ort_int8_threads_cores_nospin", plan="cores_nospin", facts=PassFacts(
    runtime="onnxruntime", precision="int8", requires=ORT, priors=int8_priors(1.89, 0.8),
    cost=SettingCost(), plans=(InPlan("text", "full", 6),),
    summary="per-channel INT8 on every usable core, without spinning"))
class Int8ThreadsPass(OrtThreadsPass):
    """Thread plans on top of the per-channel INT8 graph (the plain thread variants start
    from the fp32 fused graph). Which plan wins depends on the machine and on what else runs
    on it: on a busy 2-core container one intra-op thread without spinning beat two spinning
    threads at p95 in our runs, while an idle machine favours two; so both are built and the
    search measures them."""

    source = "ort_int8_dynamic_per_channel"
    fallback_source = None

    def __init__(self, plan: Plan = "one") -> None:
        super().__init__(plan)
        self.name = f"ort_int8_threads_{plan}"
