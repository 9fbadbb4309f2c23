"""Session thread settings sized from the cgroup CPU quota (hardware.effective_cores), not
the host's core count: a container allowed 2 CPUs on a 64-core host that starts 64 threads
spends its quota on contention.

Plans: "one" (1 intra-op thread: the most concurrent requests per CPU), "cores" (one
intra-op thread per effective core, spinning on: lowest single-request latency), and
"cores_nospin" (same without spinning: idle workers stop burning quota between requests)."""

from __future__ import annotations

from typing import Any, Literal

from infertune.models.variant import Manifest, PassRecord
from infertune.optimize.passes._onnx import OrtDerivedPass
from infertune.optimize.passes.base import PassContext

Plan = Literal["one", "cores", "cores_nospin"]


class OrtThreadsPass(OrtDerivedPass):
    source: str | None = "ort_fused"
    fallback_source: str | None = "ort_fp32"

    def __init__(self, plan: Plan = "cores") -> None:
        self.plan = plan
        self.name = f"ort_threads_{plan}"

    def settings(self) -> dict[str, Any]:
        return {"plan": self.plan}

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
