"""Read the autoscaling facts a run folder measured, through artifacts.RunDir (serve/ never
imports optimize/ or report/; DESIGN.md's layering, so report.json's one figure is read by key).

Keys read (each optional; a missing one leaves the fact unknown, never invented):
  scenario.yaml   slo, traffic (mean_rps, peak_rps, pattern), deployment.cost_per_hour_usd,
                  constraints.cost_ceiling_usd_per_1k, inputs.typical.batch_size (inputs per
                  request)
  serving.json    RunDir.serving(): .curve (the measured ServiceCurve), .simulated_goodput
                  (the sweep's simulated goodput of the chosen policy: an estimate)
  profile.json    "cold_start".total_s (import + load + first inference in a fresh process),
                  by key: the one figure of a large file, so a partial profile still serves
  report.json     "scale_out"."derivations"."replica_capacity_rps" when its source is
                  "measured": the per-instance goodput at the SLO the report sized from (it
                  replaces the simulated one, so serve scales on the report's measured figure)

    plan_for_run(run_dir, policy, limits) -> AutoscalePlan    from a run folder's files
    plan_from(facts_from(...), policy, ...) -> AutoscalePlan  from values already read (the
                                                              report's scale-out section)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from infertune.artifacts import RunDir, ServingFile
from infertune.config import Scenario, ServePolicy
from infertune.errors import ConfigError
from infertune.measure.curve import ServiceCurve
from infertune.serve.engines.autoscale import (
    RAY_PUSH_INTERVAL_S,
    AutoscalePlan,
    Demand,
    Limits,
    ReplicaFacts,
    derive_plan,
)

BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class Sourced:
    value: float
    source: str


@dataclass(frozen=True)
class RunFacts:
    demand: Demand = field(default_factory=Demand)
    cost_per_hour_usd: float | None = None
    cost_ceiling_usd_per_1k: float | None = None
    service_ms: dict[int, float] | None = None
    service_source: str = ""
    cold_start: Sourced | None = None
    goodput: Sourced | None = None
    inputs_per_request: float = 1.0  # the scenario's typical batch size

    def limits(self, base: Limits) -> Limits:
        """``base`` (CPUs) with this run's money facts."""
        return replace(base, cost_per_hour_usd=self.cost_per_hour_usd,
                       cost_ceiling_usd_per_1k=self.cost_ceiling_usd_per_1k)


def demand_from_scenario(scenario: Scenario, source: str) -> Demand:
    """The tightest tail target is the one that decides the operating point (p99 before p95
    before p50: W(b) is a near-worst-case bound, so it is held to the highest percentile set)."""
    targets = scenario.slo.targets()
    key = next((k for k in ("p99", "p95", "p50") if k in targets), None)
    t = scenario.traffic
    return Demand(slo_ms=targets[key] if key else None,
                  slo_source=f"{key} target from {source}" if key else "",
                  mean_rps=t.mean_rps, peak_rps=t.peak_rps, pattern=t.pattern)


def read_run(run_dir: Path, batch_sizes: tuple[int, ...] = BATCH_SIZES) -> RunFacts:
    """The facts ``run_dir`` holds; ConfigError naming the file when one is malformed."""
    run = RunDir(run_dir)
    paths = run.paths
    scenario = run.scenario() if paths.scenario.is_file() else None
    serving = run.serving() if paths.serving.is_file() else ServingFile()
    facts = facts_from(scenario, str(paths.scenario), serving.curve, str(paths.serving),
                       batch_sizes)
    if serving.simulated_goodput is not None:
        facts = replace(facts, goodput=Sourced(serving.simulated_goodput,
                        f"estimate: simulated goodput in {paths.serving}"))
    if paths.report_json.is_file():
        measured = _measured_capacity(run.read(paths.report_json), paths.report_json)
        if measured is not None:
            facts = replace(facts, goodput=measured)
    # by key, not RunDir.profile(): a profile whose other sections no longer validate (an older
    # run's) still gives its cold start, the one figure serve needs from it
    cold = run.read(paths.profile).get("cold_start") if paths.profile.is_file() else None
    if isinstance(cold, dict) and cold.get("total_s") is not None:
        facts = replace(facts, cold_start=cold_start_fact(float(cold["total_s"]),
                                                          str(paths.profile)))
    return facts


def facts_from(scenario: Scenario | None, scenario_source: str, curve: ServiceCurve | None,
               curve_source: str,
               batch_sizes: tuple[int, ...] = BATCH_SIZES) -> RunFacts:
    """The scenario's demand and money facts and the measured service curve, as RunFacts
    (the run's saved record holds the same values the files do)."""
    facts = RunFacts()
    if scenario is not None:
        typical = scenario.inputs.typical
        facts = replace(facts, demand=demand_from_scenario(scenario, scenario_source),
                        inputs_per_request=float(typical.batch_size)
                        if typical is not None and typical.batch_size else 1.0,
                        cost_per_hour_usd=scenario.deployment.cost_per_hour_usd,
                        cost_ceiling_usd_per_1k=scenario.constraints.cost_ceiling_usd_per_1k)
    if curve is not None:
        facts = replace(facts, service_ms={b: curve.latency_ms(b) for b in batch_sizes},
                        service_source=f"measured service curve in {curve_source} "
                        "(p50, interpolated between measured batches)")
    return facts


def cold_start_fact(total_s: float, where: str) -> Sourced:
    return Sourced(total_s, f"measured in a fresh process, {where}; a Ray replica adds its "
                   "actor start on top")


def plan_for_run(run_dir: Path, policy: ServePolicy, limits: Limits | None = None,
                 cold_start: Sourced | None = None,
                 goodput: Sourced | None = None) -> AutoscalePlan:
    """The autoscaling plan for serving ``run_dir``'s variant with ``policy`` (max_replicas is
    the instances needed at the peak unless ``limits`` name a cluster size or the run a cost
    ceiling). ``cold_start`` and ``goodput`` override the run's (a
    replica start measured on the cluster; a per-replica goodput measured by a load test, e.g.
    benchmarks/ray_scaling.py). ConfigError when the run has no measured service curve or
    cold start and none is passed."""
    return plan_from(read_run(run_dir), policy, limits, cold_start=cold_start, goodput=goodput,
                     where=run_dir)


def plan_from(facts: RunFacts, policy: ServePolicy, limits: Limits | None = None, *,
              cold_start: Sourced | None = None, goodput: Sourced | None = None,
              where: Path | str = "the run", push_interval_s: float = RAY_PUSH_INTERVAL_S,
              push_source: str = "Ray's default") -> AutoscalePlan:
    """plan_for_run's arithmetic on facts already read (``where`` names the run in errors)."""
    if goodput is not None:
        facts = replace(facts, goodput=goodput)
    if facts.service_ms is None:
        raise ConfigError(f"{where}: no measured service curve (serving.json); run "
                          "infertune optimize on this model first")
    cold = cold_start or facts.cold_start
    if cold is None:
        raise ConfigError(f"{where}: no measured cold start (profile.json); rerun infertune "
                          "optimize without --quick (or serve with --engine ray, which measures "
                          "a replica's start)")
    replica = ReplicaFacts(
        service_ms=facts.service_ms, service_source=facts.service_source,
        cold_start_s=cold.value, cold_start_source=cold.source,
        max_batch_size=policy.max_batch_size, max_wait_ms=policy.max_wait_ms,
        goodput_rps=facts.goodput.value if facts.goodput else None,
        goodput_source=facts.goodput.source if facts.goodput else "",
        inputs_per_request=facts.inputs_per_request, timeout_ms=policy.timeout_ms)
    return derive_plan(replica, facts.demand, facts.limits(limits or Limits()),
                       push_interval_s=push_interval_s, push_source=push_source)


def _measured_capacity(report: dict[str, Any], path: Path) -> Sourced | None:
    # report.json as its raw JSON object, not report.schema.Report: report/ is a layer above
    # serve/ (tests/unit/test_import_graph.py's LAYERS), and a report that no longer validates
    # as a whole (an older run's) still gives this one figure, so it is read by key and
    # checked here
    scale_out = report.get("scale_out")
    figure = (scale_out.get("derivations") or {}).get("replica_capacity_rps") if isinstance(
        scale_out, dict) else None
    if not isinstance(figure, dict) or figure.get("source") != "measured":
        return None
    value = figure.get("value")
    if not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"{path}: scale_out.derivations.replica_capacity_rps has no positive "
                          "value; rerun infertune optimize")
    return Sourced(float(value), f"measured: per-instance goodput at the SLO in {path} "
                   f"({figure.get('basis', '')})")

