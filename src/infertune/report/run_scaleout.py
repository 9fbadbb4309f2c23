"""The run report's right-sizing, measured (issue 16): how many instances of this machine the
scenario's peak needs, from the per-instance goodput the load tests measured at the SLO, and
the Ray Serve ``autoscaling_config`` that deploys them (`infertune serve RUN --engine ray`).

    scale_out(run, slo_check) -> ScaleOut | None      None when no serving sweep ran

The per-instance goodput is the highest goodput the SLO check measured (a rate at which every
SLO percentile held; a lower bound on what one instance sustains, so the instance count is at
most what the peak needs). The autoscaling numbers come from serve/engines/autoscale.py's
derive_plan, fed with the run's measured service curve and cold start, the served policy and
that goodput; each is shown with its reasoning. When the load tests ran and nothing met the
SLO there is no measured goodput: the section says so and shows the percentiles reached, but
no instance count (the measurements contradict any count sized from the simulator, and
instances do not fix a miss at the lowest rate). When they did not run, it sizes from the
simulator's goodput, labelled an estimate. Nothing here is invented: a fact the run did not
measure (a --quick run has no cold start) leaves its numbers out, saying why.
"""

from __future__ import annotations

import math

from infertune.errors import ConfigError
from infertune.optimize.record import RunRecord
from infertune.optimize.served.policy_sweep import SweepResult
from infertune.report.schema import Figure, ScaleOut, SloCheck, SloPoint
from infertune.serve.engines.autoscale import AutoscalePlan, Limits, RayAutoscaling
from infertune.serve.engines.run_facts import Sourced, cold_start_fact, facts_from, plan_from

DEPLOY = "infertune serve <this run folder> --engine ray"
RAY_KEYS = tuple(RayAutoscaling.__annotations__)


def scale_out(run: RunRecord, check: SloCheck | None) -> ScaleOut | None:
    sw = run.sweep.sweep
    if sw is None:
        return None
    out = ScaleOut(variant_id=sw.variant_id, policy_id=sw.best.policy_id, deploy=DEPLOY,
                   peak=Figure(value=sw.peak_rps, unit="requests/s", source="estimate",
                               basis="the scenario's stated peak rate"))
    measured = best_measured(check)
    goodput: Sourced | None
    if measured is not None and measured.goodput is not None:
        goodput = _size_from_measured(out, sw, measured,
                                      run.profiling.hardware_label or "this machine")
    elif _tested(check):
        # measured misses outrank the simulator: a count sized from its goodput would claim
        # what the load tests contradict, and instances do not fix a miss at the lowest rate
        out.statement = _missed_statement(check)
        out.warnings.append(
            "no instance count and no Ray Serve settings: one instance missed the SLO at every "
            "tested rate, so no number of instances is known to meet it; first make one "
            "instance meet it (see what would meet the SLO), then size from its goodput")
        return out
    else:
        goodput = _size_from_simulator(out, sw, run.profiling.hardware_label or "this machine")
    plan, why_not = _plan(run, goodput)
    if plan is None:
        out.warnings.append(f"no Ray Serve settings derived: {why_not}")
        return out
    _add_plan(out, plan)
    return out


def _size_from_measured(out: ScaleOut, sw: SweepResult, measured: SloPoint,
                        hw: str) -> Sourced:
    """Fill ``out``'s goodput, instance count and statement from the load test that held the
    SLO at the highest goodput; return that goodput for the autoscaling plan."""
    fig = measured.goodput
    assert fig is not None and fig.value is not None
    out.per_instance_goodput = fig
    if measured.label == "peak" and fig.value >= sw.peak_rps - 1e-9:
        # the peak's own load test held the SLO on one instance at the stated peak rate.
        # Its goodput is what that test measured; when a finite sample of the schedule fell
        # short of the stated peak, the count below is sized from the measured goodput
        # instead: raising it to the stated peak and labelling that "measured" (as before
        # session 9) claimed what no test showed
        out.instances_at_peak = Figure(
            value=1, unit="instances", source="measured", samples=fig.samples,
            artifact=fig.artifact, inputs=[fig],
            basis=f"one instance held the SLO in the load test at the peak rate ({fig.basis})")
        out.statement = (f"One instance of {hw} measurably keeps the SLO at the peak rate "
                         f"of {sw.peak_rps:g} requests/s.")
        return Sourced(fig.value, "measured: one instance held the SLO in the load "
                       f"test at the stated peak rate ({fig.basis})")
    n = max(1, math.ceil(sw.peak_rps / fig.value - 1e-9))
    out.instances_at_peak = Figure(value=n, unit="instances", source="estimate",
                                   inputs=[f for f in (fig, out.peak) if f], basis=(
        f"ceil(peak {sw.peak_rps:g} req/s / {fig.value:g} req/s per instance), the "
        f"goodput one instance kept the SLO at ({fig.basis}); that goodput is a "
        "measured lower bound, so this is at most the number needed"))
    out.statement = (f"One instance of {hw} measurably keeps the SLO at {fig.value:g} "
                     f"requests/s, so the peak of {sw.peak_rps:g} requests/s needs at "
                     f"most {n} instance(s).")
    return Sourced(fig.value, f"measured at the {measured.label} rate: {fig.basis}")


def _size_from_simulator(out: ScaleOut, sw: SweepResult, hw: str) -> Sourced | None:
    """No load test of the chosen policy ran: size from the simulator's goodput, labelled an
    estimate (None, and no count, when the simulator has none)."""
    best = sw.best
    out.statement = ("No per-instance goodput was measured: the load tests of the chosen "
                     "policy did not run, so the sizing below is an estimate.")
    if not best.goodput_rps:
        return None
    goodput = Sourced(best.goodput_rps, "estimate: the queueing simulator's goodput of "
                      f"policy {best.policy_id}, fed with service times measured on "
                      f"{hw}; not confirmed by a load test")
    n = max(1, math.ceil(sw.peak_rps / best.goodput_rps - 1e-9))
    out.instances_at_peak = Figure(value=n, unit="instances", source="estimate", basis=(
        f"ceil(peak {sw.peak_rps:g} req/s / {best.goodput_rps:.3g} req/s per "
        f"instance, {goodput.source})"), inputs=[f for f in (out.peak,) if f])
    return goodput


def _add_plan(out: ScaleOut, plan: AutoscalePlan) -> None:
    """Each autoscaling number with its reasoning (the replica capacity marked measured when
    the goodput it comes from was), the Ray Serve settings and the plan's warnings."""
    g = out.per_instance_goodput
    for name, d in plan.derivations().items():
        if name == "replica_capacity_rps" and g is not None:
            out.derivations[name] = Figure(value=d.value, unit=d.unit, source="measured",
                                           samples=g.samples, artifact=g.artifact, inputs=[g],
                                           basis=d.reasoning)
        else:
            out.derivations[name] = Figure(value=d.value, unit=d.unit, source="estimate",
                                           basis=f"derived: {d.reasoning}")
    ray = plan.ray_autoscaling()
    out.settings = {key: ray[key] for key in RAY_KEYS}  # type: ignore[literal-required]
    out.settings["max_ongoing_requests"] = int(plan.max_ongoing_requests.value)
    out.warnings += plan.warnings


def best_measured(check: SloCheck | None) -> SloPoint | None:
    """The tested rate with the highest measured goodput (every SLO percentile held there)."""
    if check is None:
        return None
    kept = [p for p in check.points
            if p.meets_slo and p.goodput is not None and p.goodput.value]
    return max(kept, key=lambda p: p.goodput.value if p.goodput and p.goodput.value else 0.0,
               default=None)


def _tested(check: SloCheck | None) -> bool:
    """A rate's verdict was decided by a load test (meets or misses, not "not shown")."""
    return check is not None and any(p.meets_slo is not None for p in check.points)


def _missed_statement(check: SloCheck | None) -> str:
    assert check is not None
    reached = []
    for p in check.points:
        for key, target in check.targets.items():
            fig = getattr(p.measured, key, None)
            if fig is not None and fig.value is not None:
                reached.append(f"{key} {fig.value:.1f} ms against {target:g} ms at the "
                               f"{p.label} rate")
    shown = f" (measured: {'; '.join(reached)})" if reached else ""
    return f"No per-instance goodput was measured: no tested rate met the SLO{shown}."


def _plan(run: RunRecord, goodput: Sourced | None) -> tuple[AutoscalePlan | None, str]:
    sw = run.sweep.sweep
    assert sw is not None
    policy = sw.best.serve_policy
    facts = facts_from(run.scenario, "the run's scenario.yaml", run.sweep.curve,
                       f"run.json (measured on {run.profiling.hardware_label or 'this machine'})")
    cold = run.profiling.profile.cold_start if run.profiling.profile is not None else None
    try:
        plan = plan_from(
            facts, policy, Limits(cpus_per_replica=float(policy.model_threads or 1)),
            cold_start=cold_start_fact(cold.total_s, "profile.json") if cold else None,
            goodput=goodput, where="this run")
    except ConfigError as exc:
        return None, (f"{exc}; `infertune serve <run> --engine ray` measures a replica's "
                      "start itself and derives them when it starts")
    except ValueError as exc:  # a degenerate service curve (no positive time)
        return None, f"the measured service curve cannot size a replica ({exc})"
    return plan, ""
