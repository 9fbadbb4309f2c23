"""The deployment plan: every number an export writes, each with the sentence saying where it
came from (the run's report.json, the variant's manifest.json, scenario.yaml, hardware.json,
a command-line override, or a stated choice of ours). Renderers (triton.py, kubernetes.py,
kserve.py) only format a DeployPlan; they compute nothing.

Derivations (Little's law on the measured capacity, goodput G requests/s per server and
service time S, with the SLO's targets T):

    queue timeout        deadline - S          a request still queued then cannot make it
    autoscaler target    G x (min T - S)       waiting requests per pod before the tightest
                                               target is at risk
    replicas             mean_rps / G .. peak_rps / G   (ceil), from the scenario's traffic
    grace period         preStop + deadline + S  a request admitted before SIGTERM is answered
                                               or shed by its deadline
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from infertune.config import CLIENT_DEADLINE_FACTOR
from infertune.errors import ConfigError
from infertune.export.source import ExportSource
from infertune.serve.alerts import AlertThresholds, Capacity
from infertune.serve.worker_threads import threads_per_worker

V = TypeVar("V", int, float, str)

# Time for kube-proxy and ingress controllers to drop a terminating pod's endpoint before the
# server stops accepting; a choice of ours (not measured here), stated wherever it is used.
ENDPOINT_PROPAGATION_S = 5


@dataclass(frozen=True)
class Sourced(Generic[V]):
    value: V
    source: str


@dataclass(frozen=True)
class Overrides:
    """Command-line values that win over the run's (each is said to come from the command)."""

    name: str | None = None
    cpus: float | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    canary_percent: int | None = None


@dataclass(frozen=True)
class DeployPlan:
    name: str  # Kubernetes object / Triton model name (DNS-1123 label)
    source: ExportSource
    max_batch_size: Sourced[int]
    max_wait_us: Sourced[int]
    workers: Sourced[int]
    intra_op_threads: Sourced[int]  # 0: the runtime decides
    inter_op_threads: Sourced[int]
    max_queue: Sourced[int]
    deadline_ms: Sourced[float] | None
    queue_timeout_us: Sourced[int] | None
    cpus: Sourced[float]
    min_replicas: Sourced[int]
    max_replicas: Sourced[int]
    queue_target: Sourced[int]
    concurrency_target: Sourced[int]
    pre_stop_s: Sourced[int]
    grace_s: Sourced[int]
    alerts: AlertThresholds
    canary_percent: Sourced[int] | None


def k8s_name(text: str) -> str:
    """A DNS-1123 label: lower case alphanumerics and '-', at most 63 characters."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].rstrip("-")
    if not name:
        raise ConfigError(f"cannot make a Kubernetes name from {text!r}; pass --name")
    return name


def plan(src: ExportSource, overrides: Overrides | None = None) -> DeployPlan:
    o = overrides or Overrides()
    pol, origin = src.policy, src.policy_origin
    measured = measured_capacity(src)
    deadline = _deadline(src)
    cpus = _cpus(src, o)
    lo, hi = _replicas(src, measured, o)
    return DeployPlan(
        name=k8s_name(o.name or f"infertune-{src.manifest.id}"),
        source=src,
        max_batch_size=Sourced(pol.max_batch_size, f"{origin}: max_batch_size"),
        max_wait_us=Sourced(round(pol.max_wait_ms * 1000),
                            f"{origin}: max_wait_ms = {pol.max_wait_ms:g}"),
        workers=Sourced(pol.workers, f"{origin}: workers"),
        intra_op_threads=_threads(src, cpus),
        inter_op_threads=Sourced(src.manifest.threads.inter_op, _manifest(src, "threads.inter_op")
                                 + " (0: the runtime decides)"),
        max_queue=Sourced(pol.max_queue, f"{origin}: max_queue"),
        deadline_ms=deadline,
        queue_timeout_us=_queue_timeout(deadline, measured),
        cpus=cpus, min_replicas=lo, max_replicas=hi,
        queue_target=_queue_target(src, measured),
        concurrency_target=_concurrency_target(src, measured),
        pre_stop_s=Sourced(ENDPOINT_PROPAGATION_S, "our choice: time for endpoints to drop a "
                           "terminating pod before the server stops accepting (not measured)"),
        grace_s=_grace(deadline, measured),
        alerts=AlertThresholds.derive(src.slo, pol, measured),
        canary_percent=_canary(src, o),
    )


def _manifest(src: ExportSource, field: str) -> str:
    return f"variants/{src.manifest.id}/manifest.json {field}"


def measured_capacity(src: ExportSource) -> Capacity | None:
    """Goodput of the chosen policy and p50 service time of the variant, both from
    report.json; None when the run measured either not."""
    row, vrow = src.policy_row, src.variant_row
    if row is None or vrow is None:
        return None
    goodput, service = row.goodput, vrow.latency.p50
    if goodput is None or goodput.value is None or service is None or service.value is None:
        return None
    if goodput.value <= 0:  # no rate kept the SLO: nothing to size replicas or queues from
        return None
    return Capacity(goodput.value, service.value,
                    f"report.json policies[{row.policy_id}].goodput = {goodput.value:g} "
                    f"req/s ({goodput.source}: {goodput.basis}); variants[{src.manifest.id}]"
                    f".latency.p50 = {service.value:g} ms ({service.source})")


def _deadline(src: ExportSource) -> Sourced[float] | None:
    if src.policy.timeout_ms is not None:
        return Sourced(src.policy.timeout_ms, f"{src.policy_origin}: timeout_ms")
    targets = src.slo.targets()
    if not targets:
        return None
    name = max(targets, key=lambda k: targets[k])
    return Sourced(CLIENT_DEADLINE_FACTOR * targets[name], f"{CLIENT_DEADLINE_FACTOR:g} x "
                   f"scenario.yaml slo.{name}_ms, the loosest target (serve's deadline when "
                   "the policy sets no timeout_ms)")


def _queue_timeout(deadline: Sourced[float] | None,
                   capacity: Capacity | None) -> Sourced[int] | None:
    if deadline is None:
        return None
    if capacity is None:
        return Sourced(round(deadline.value * 1000), f"the deadline ({deadline.source}); no "
                       "measured service time to subtract")
    left_ms = deadline.value - capacity.service_ms
    if left_ms <= 0:
        raise ConfigError(f"the deadline {deadline.value:g} ms is shorter than the measured "
                          f"service time {capacity.service_ms:g} ms: no queue timeout can keep "
                          "the SLO; loosen the SLO or export a faster variant")
    return Sourced(round(left_ms * 1000), f"deadline {deadline.value:g} ms ({deadline.source}) "
                   f"minus the measured service time {capacity.service_ms:g} ms "
                   f"({capacity.source})")


def _cpus(src: ExportSource, o: Overrides) -> Sourced[float]:
    if o.cpus is not None:
        return Sourced(o.cpus, "--cpus on the command line")
    if src.hardware is None:
        raise ConfigError(f"{src.label}: no hardware.json, whose cores the CPU request comes "
                          "from; pass --cpus N")
    hw = src.hardware
    return Sourced(float(hw.effective_cores), f"hardware.json effective_cores: the run measured "
                   f"on {hw.effective_cores} core(s) of {hw.cpu_model}")


def _threads(src: ExportSource, cpus: Sourced[float]) -> Sourced[int]:
    t, pol = src.manifest.threads, src.policy
    # serve's rule (serve/worker_threads.py), so the export states what serve runs
    threads = threads_per_worker(t.intra_op, pol, int(cpus.value))
    if t.intra_op > 0:
        return Sourced(threads, _manifest(src, "threads.intra_op"))
    if pol.model_threads is not None:
        return Sourced(threads, f"{src.policy_origin}: model_threads")
    # each engine instance (a Triton model instance, a serve worker) runs its own thread
    # pool: the measured cores are shared between them, as serve sizes its workers, so that
    # the pools do not oversubscribe the cores
    return Sourced(threads, f"{int(cpus.value)} core(s) ({cpus.source}) // {pol.workers} "
                   "worker(s), so the instances' thread pools share the cores")


def _replicas(src: ExportSource, capacity: Capacity | None,
              o: Overrides) -> tuple[Sourced[int], Sourced[int]]:
    tr = src.traffic
    if capacity is not None and tr.mean_rps is not None:
        g = capacity.goodput_rps
        peak = tr.peak_rps or tr.mean_rps
        lo = Sourced(max(1, math.ceil(tr.mean_rps / g)),
                     f"ceil(scenario.yaml traffic.mean_rps {tr.mean_rps:g} / goodput {g:g} "
                     "req/s per pod)")
        hi = Sourced(max(lo.value, math.ceil(peak / g)),
                     f"ceil(scenario.yaml traffic.{'peak' if tr.peak_rps else 'mean'}_rps "
                     f"{peak:g} / goodput {g:g} req/s per pod)")
    else:
        why = "no measured goodput" if capacity is None else "no traffic.mean_rps in the scenario"
        lo = Sourced(1, f"{why}: one pod; pass --min-replicas")
        hi = Sourced(1, f"{why}: one pod; pass --max-replicas")
    if o.min_replicas is not None:
        lo = Sourced(o.min_replicas, "--min-replicas on the command line")
    if o.max_replicas is not None:
        hi = Sourced(o.max_replicas, "--max-replicas on the command line")
    if hi.value < lo.value:
        raise ConfigError(f"max replicas {hi.value} ({hi.source}) is below min replicas "
                          f"{lo.value} ({lo.source}); raise --max-replicas")
    return lo, hi


def _queue_target(src: ExportSource, capacity: Capacity | None) -> Sourced[int]:
    targets = src.slo.targets()
    if capacity is not None and targets:
        tightest = min(targets.values())
        slack_s = max(0.0, (tightest - capacity.service_ms) / 1000.0)
        return Sourced(max(1, math.floor(capacity.goodput_rps * slack_s)),
                       f"floor(goodput {capacity.goodput_rps:g} req/s x (tightest SLO target "
                       f"{tightest:g} ms - service {capacity.service_ms:g} ms)), at least 1")
    pol = src.policy
    return Sourced(pol.max_batch_size * pol.workers,
                   f"max_batch_size x workers ({src.policy_origin}): one full batch waiting per "
                   "worker; no measured goodput and SLO to derive it from")


def _concurrency_target(src: ExportSource, capacity: Capacity | None) -> Sourced[int]:
    targets = src.slo.targets()
    if capacity is not None and targets:
        tightest = min(targets.values())
        return Sourced(max(1, math.ceil(capacity.goodput_rps * tightest / 1000.0)),
                       f"ceil(goodput {capacity.goodput_rps:g} req/s x tightest SLO target "
                       f"{tightest:g} ms): requests in flight per pod at goodput (Little's law)")
    pol = src.policy
    return Sourced(pol.max_batch_size * pol.workers,
                   f"max_batch_size x workers ({src.policy_origin}); no measured goodput")


def _grace(deadline: Sourced[float] | None, capacity: Capacity | None) -> Sourced[int]:
    if deadline is None:
        return Sourced(30, "Kubernetes' default: serve has no deadline here (no SLO, no "
                       "timeout_ms), so a queued request's wait is unbounded; set one")
    service = capacity.service_ms if capacity is not None else 0.0
    drain_s = (deadline.value + service) / 1000.0
    return Sourced(math.ceil(ENDPOINT_PROPAGATION_S + drain_s) + 1,
                   f"preStop {ENDPOINT_PROPAGATION_S} s + deadline {deadline.value:g} ms + one "
                   f"service time {service:g} ms (a request admitted before SIGTERM is answered "
                   "or shed by its deadline) + 1 s to exit, rounded up")


def _canary(src: ExportSource, o: Overrides) -> Sourced[int] | None:
    if o.canary_percent is not None:
        if not 0 <= o.canary_percent <= 100:
            raise ConfigError(f"--canary-percent {o.canary_percent} is not a percentage; "
                              "pass 0..100")
        return Sourced(o.canary_percent, "--canary-percent on the command line")
    if src.canary_percent is not None:
        return Sourced(src.canary_percent, f"the registry's latest routing event: canary "
                       f"weight of release {src.name!r}")
    return None


class SourcedValue(BaseModel):
    model_config = ConfigDict(extra="forbid")

    value: int | float | str
    source: str


class ExportRecord(BaseModel):
    """export.json (schema infertune.export/v1): what was written, every number with its
    source; ``--json`` prints it."""

    model_config = ConfigDict(extra="forbid")

    schema_: Literal["infertune.export/v1"] = Field(default="infertune.export/v1",
                                                    alias="schema")
    name: str
    source: str
    source_kind: str
    variant_id: str
    target: str
    files: list[str]
    values: dict[str, SourcedValue]
    alerts: dict[str, SourcedValue]

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ExportRecord:
        return cls.model_validate_json(text)


def summary(p: DeployPlan, target: str, files: list[str]) -> ExportRecord:
    """The plan's numbers with their sources, for export.json and --json."""
    values: dict[str, SourcedValue] = {}
    for key in ("max_batch_size", "max_wait_us", "workers", "intra_op_threads",
                "inter_op_threads", "max_queue", "deadline_ms", "queue_timeout_us", "cpus",
                "min_replicas", "max_replicas", "queue_target", "concurrency_target",
                "pre_stop_s", "grace_s", "canary_percent"):
        item = getattr(p, key)
        if item is not None:
            values[key] = SourcedValue(value=item.value, source=item.source)
    a = p.alerts
    alerts = {f"latency_{k}_s": SourcedValue(value=t.value, source=t.source)
              for k, t in a.latency_s.items()}
    alerts["error_ratio"] = SourcedValue(value=a.error_ratio.value, source=a.error_ratio.source)
    alerts["queue_depth"] = SourcedValue(value=a.queue_depth.value, source=a.queue_depth.source)
    return ExportRecord(name=p.name, source=p.source.label, source_kind=p.source.kind,
                        variant_id=p.source.manifest.id, target=target, files=files,
                        values=values, alerts=alerts)
