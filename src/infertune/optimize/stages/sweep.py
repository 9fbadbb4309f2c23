"""Stage "serving policy" of ``optimize``: the policy sweep on the finalist variants with its
in-process load tests (a pre-screen: the confirmation as served, confirm_served.py, decides) and
right-sizing. Writes serving.json and returns its two artifacts, the SweepArtifact and the
ConfirmArtifact (``ServingArtifacts``); the winner's contention measurement, a live handle,
stays on the RunState."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infertune.artifacts import ServingFile
from infertune.config import ServePolicy, client_deadline_ms, client_deadline_reason
from infertune.data.text_inputs import is_text_input
from infertune.measure.curve import ServiceCurve, measure_curve, seq_lens_from_lengths
from infertune.models.adapter import Adapter
from infertune.optimize.findings import ConfirmArtifact, LoadCurve, SweepArtifact
from infertune.optimize.record import RunRecord
from infertune.optimize.search.budget import Budget, Progress
from infertune.optimize.search.choice import (
    adapter_of,
    best_variant_id,
    measured_inside_slo,
    ranked_variants,
)
from infertune.optimize.search.timing import fastest_at_largest_batch
from infertune.optimize.served.cascade_eval import right_size
from infertune.optimize.served.policy_sweep import (
    SimStats,
    SimulateFn,
    SweepGrid,
    SweepResult,
    measured_key,
    rerank_measured,
    sweep,
    validation_key,
)
from infertune.optimize.served.traffic import (
    Contention,
    Validation,
    make_simulator,
    measure_contention,
    sim_arrivals,
    validate_policy,
)
from infertune.optimize.stages.confirm_served import (
    confirm_as_served,
    confirm_reserve_s,
    promote_winner,
    scenario_rates,
)
from infertune.optimize.state import RunState, StageContext
from infertune.serve.worker_threads import fit_to_workers

NEED_SERVING_S = 20.0
# a second finalist: a rough allowance for its curve, contention and simulated sweep, and
# two load tests of VALIDATE_S each
NEED_FINALIST_S = 10.0 + 2 * (6.0 + 2.0)
VALIDATE_S = 4.0  # in-process pre-screen; the confirmation as served decides
VALIDATE_QUICK_S = 2.5


def _overhead_ms(state: RunState) -> float:
    """Tokenise + postprocess + glue per request (p50s from the baseline profile): the curve
    times forward only, and the pre/postprocessing is the same for every variant."""
    prof = state.profiling.profile
    if prof is None:
        return 0.0
    s = prof.stages.summaries
    return sum(s[k].p50 for k in ("preprocess", "postprocess", "overhead") if k in s)


@dataclass(frozen=True)
class ServingArtifacts:
    """What stage "serving policy" returns: the finalists' sweeps, and their confirmation as
    served (run within the stage; run.py stores each under its own name in the run)."""

    sweep: SweepArtifact = field(default_factory=SweepArtifact)
    confirm: ConfirmArtifact = field(default_factory=ConfirmArtifact)


def run(ctx: StageContext) -> ServingArtifacts:
    """The policy sweep for the chosen variant, its load tests and right-sizing."""
    state, budget = ctx.state, ctx.budget
    mean, peak = scenario_rates(state)
    if mean is None or peak is None:  # said first: no budget would help
        state.skip("serving-policy sweep", "the scenario states no request rate; set "
                   "traffic.mean_rps (and peak_rps)")
        return ServingArtifacts()
    if not budget.allows(NEED_SERVING_S):
        state.skip("serving-policy sweep", "time budget exhausted", NEED_SERVING_S)
        return ServingArtifacts()
    return run_sweep(state, budget, ctx.progress, mean, peak)


def run_sweep(state: RunState, budget: Budget, progress: Progress, mean: float,
              peak: float) -> ServingArtifacts:
    """The joint search: for each finalist variant (the chosen one, then the runner-up when
    the budget allows) a service curve, a simulated policy sweep and load tests of its
    leading policies through serve's runtime; the configuration (variant x policy) that
    measures best wins, and the report recommends it."""
    found = SweepArtifact()
    swept: list[Sweep] = []
    for i, variant_id in enumerate(finalists(state)):
        if i > 0 and not budget.allows(NEED_FINALIST_S + confirm_reserve_s(state, budget)):
            state.skip(f"joint search over {variant_id}", "time budget exhausted; the search "
                       "compared policies for the first variant only", NEED_FINALIST_S)
            continue
        # loaded now (and the previous finalist released): its curve is timed with no other
        # variant's threads left spinning in this process (VariantAdapters)
        adapter = adapter_of(state, variant_id)
        one = _sweep_variant(state, budget, progress, variant_id, adapter, mean, peak)
        _validate(state, budget, progress, adapter, one.result, mean, peak, found.validations)
        del adapter
        rerank_measured(one.result)
        swept.append(one)
    if not swept:
        return ServingArtifacts(sweep=found)
    # only load-tested finalists compete on their measurements; with none, the first stands
    tested = [one for one in swept if one.result.best.validated_peak is not None
              or one.result.best.validated_mean is not None]
    best = (min(tested, key=lambda one: measured_key(one.result.best, one.result.slo))
            if tested else swept[0])
    # the in-process load tests were the pre-screen; served in its own process decides
    confirmed = confirm_as_served(state, budget, progress, [one.result for one in swept])
    served = promote_winner(confirmed, [one.result for one in swept])
    best = next((one for one in swept if one.result.variant_id == served), best)
    found.finalist_sweeps = [s.result for s in swept]
    found.sweep, found.curve = best.result, best.curve
    state.contention = best.contention
    found.load_curves = best.load_curves
    cores = state.profiling.hardware.effective_cores if state.profiling.hardware is not None else 1
    cost = state.options.scenario.deployment.cost_per_hour_usd
    found.right_sizing = right_size(peak, best.result.best.goodput_rps, cores, cost)
    ServingFile(
        variant_id=best.result.variant_id, sweep=best.result.to_dict(),
        finalists=[s.result.to_dict() for s in swept], curve=best.curve,
        contention=best.contention.to_dict(), overhead_ms=best.overhead_ms,
        validations={k: v.to_dict() for k, v in found.validations.items()},
        right_sizing=found.right_sizing.to_dict() if found.right_sizing else None,
    ).save(state.paths.serving)
    return ServingArtifacts(sweep=found, confirm=ConfirmArtifact(confirmation=confirmed))


@dataclass
class Sweep:
    """One finalist variant's simulated sweep and the measurements it was built from."""

    result: SweepResult
    curve: ServiceCurve
    contention: Contention
    load_curves: list[LoadCurve]
    overhead_ms: float


def finalists(state: RunState) -> list[str]:
    """The chosen variant first, then the one fastest per input at the largest batch size
    serving forms (when another), then the next-ranked variant that also passes the floor and
    is measurably faster (not with --quick): screening picks them, the serving measurement
    decides between them. Ids, not adapters: each is loaded when its turn comes."""
    first = best_variant_id(state)
    out = [first]
    if state.options.quick:
        return out
    # the fastest on the largest batch serving forms (search/screening.py), which the batch-1
    # ranking may rank low: the sweep, not batch 1, decides what serves best
    passing = [c for c in state.screen.candidates if c.quality_verdict == "pass" and not c.dropped
               and c.variant_id in state.adapters]
    batched = fastest_at_largest_batch(passing)
    if batched is not None and batched.variant_id != first:
        out.append(batched.variant_id)
    run = RunRecord.from_state(state)
    for r in ranked_variants(run, measured_inside_slo(run)):
        c, t = r.item, r.item.best_timing
        if (c.variant_id not in out and c.quality_verdict == "pass" and r.within_risk_budget
                and t is not None and t.measurably_faster and c.variant_id in state.adapters):
            out.append(c.variant_id)
            break
    return out


def _sweep_variant(state: RunState, budget: Budget, progress: Progress, variant_id: str,
                   adapter: Adapter, mean: float, peak: float) -> Sweep:
    quick = state.options.quick
    inputs = state.options.data.inputs
    lengths = token_lengths(adapter, inputs)
    max_len = getattr(getattr(adapter, "pre", None), "max_length", None)
    seq_lens = seq_lens_from_lengths(lengths, max_len) if lengths else None
    progress.tick(f"service curve of {variant_id}")
    curve = measure_curve(adapter, inputs, batch_sizes=(1, 4, 16) if quick
                          else (1, 2, 4, 8, 16), seq_lens=seq_lens,
                          repeats=3 if quick else 5,
                          max_seconds_per_point=0.1 if quick else 0.25)
    cores = state.profiling.hardware.effective_cores if state.profiling.hardware is not None else 1
    grid = SweepGrid.for_cores(cores, quick)
    feeds = adapter.preprocess([inputs[0]])
    progress.tick(f"contention of concurrent workers ({variant_id})")
    contention = measure_contention(lambda: adapter.forward(feeds), grid.workers,
                                    calls=8 if quick else 20,
                                    call_for=lambda w: _served_forward(adapter, feeds, w, cores))
    overhead = _overhead_ms(state)
    traffic = state.options.scenario.traffic
    sim = TimedSimulator(make_simulator(curve, traffic, contention=contention,
                                        seq_lens=lengths, seed=state.options.seed,
                                        overhead_ms=overhead))

    def afford_goodput(policy_id: str, bound: float) -> bool:
        # a search simulates at most GOODPUT_SIMULATIONS windows at rates up to the bound,
        # at the cost per arrival the sweep's own simulations measured
        arrivals = GOODPUT_SIMULATIONS * sim_arrivals(traffic, bound)
        need = arrivals * sim.seconds_per_arrival
        if budget.allows(need):
            return True
        state.skip(f"goodput search of {variant_id} {policy_id}",
                   f"time budget exhausted: its simulations (up to {arrivals:,.0f} arrivals at "
                   f"up to {bound:,.0f} requests/s, {sim.seconds_per_arrival * 1e6:.0f} us "
                   f"each as this sweep measured) could take ~{need:.0f} s; its goodput and "
                   "cost per 1,000 requests are not known", need)
        return False

    slo = state.options.scenario.slo.targets()
    if client_deadline_reason(slo) not in state.log.notes:
        state.log.notes.append(client_deadline_reason(slo))
    result = sweep(sim, variant_id=variant_id, slo=slo, mean_rps=mean, peak_rps=peak, grid=grid,
                   service_ms=lambda b: curve.latency_ms(b) + overhead * b,
                   cost_per_hour_usd=state.options.scenario.deployment.cost_per_hour_usd,
                   keep=3 if quick else 5, timeout_ms=serve_deadline_ms(slo),
                   on_policy=lambda i, n: progress.tick(f"simulating policy {i}/{n}"),
                   cost_ceiling_usd_per_1k=state.options.scenario.constraints
                   .cost_ceiling_usd_per_1k, afford_goodput=afford_goodput)
    return Sweep(result, curve, contention, load_curves(result, sim), overhead)


# goodput(): one simulation at the capacity bound, one at a trickle, eight bisection steps
GOODPUT_SIMULATIONS = 10


class TimedSimulator:
    """A SimulateFn that keeps the time its simulations took per arrival: the goodput search
    near a tiny model's capacity bound simulates millions of arrivals (a spiky scenario's window
    must hold its on/off cycles at any rate), and the budget is checked before it, not after."""

    def __init__(self, simulate: SimulateFn) -> None:
        self.simulate = simulate
        self.seconds = 0.0
        self.arrivals = 0

    def __call__(self, policy: ServePolicy, rate: float) -> SimStats:
        began = time.perf_counter()
        stats = self.simulate(policy, rate)
        self.seconds += time.perf_counter() - began
        self.arrivals += stats.requests
        return stats

    @property
    def seconds_per_arrival(self) -> float:
        return self.seconds / self.arrivals if self.arrivals else 0.0


def _served_forward(adapter: Adapter, feeds: Any, workers: int, cores: int) -> Callable[[], Any]:
    """One forward as each of ``workers`` workers runs it when served: on a session whose
    intra-op threads serve sized for them (serve/worker_threads.py)."""
    fitted, _ = fit_to_workers(adapter, ServePolicy(workers=workers), cores)
    return lambda: fitted.forward(feeds)


def serve_deadline_ms(slo: dict[str, float]) -> float | None:
    """The per-request deadline the policy states: config.client_deadline_ms, ten times the
    loosest SLO target, the same default ``infertune serve runs/<name>`` applies. Stated in
    the policy, the report names exactly what serve runs, and the load tests here shed late
    requests as the server will; the SLO itself is judged on the answers' percentiles."""
    return client_deadline_ms(slo)


def load_curves(sw: SweepResult, simulate: SimulateFn) -> list[LoadCurve]:
    """p99 against load for the leading policies (simulated at fractions of the peak)."""
    out = []
    for r in sw.ranked[:3]:
        pts = []
        for frac in (0.25, 0.5, 0.75, 1.0, 1.25, 1.5):
            rate = sw.peak_rps * frac
            p99 = simulate(r.serve_policy, rate).p99_ms
            if np.isfinite(p99):
                pts.append((round(rate, 3), round(p99, 3)))
        out.append(LoadCurve(r.policy_id, pts))
    return out


def _validate(state: RunState, budget: Budget, progress: Progress, adapter: Adapter,
              result: SweepResult, mean: float, peak: float,
              validations: dict[str, Validation]) -> None:
    """Real open-loop in-process load tests of the leading policies at mean and peak, into
    ``validations`` (by validation_key) and onto the policies they tested."""
    quick = state.options.quick
    seconds = VALIDATE_QUICK_S if quick else VALIDATE_S
    reserve = confirm_reserve_s(state, budget)
    # with a confirmation as served to come, the pre-screen only checks each variant's leading
    # policy (the confirmation measures the finalists properly); without one it is the final
    # word, so it checks two
    for policy in result.ranked[: 1 if quick or reserve else 2]:
        for label, rate in (("mean", mean), ("peak", peak)):
            need = seconds + 2.0
            # the confirmation as served decides; the pre-screen leaves it its time
            if not budget.allows(need + 10.0 + reserve):
                state.skip(f"load test of {result.variant_id} {policy.policy_id} at {label}",
                           "time budget exhausted; the simulated figures stand", need)
                continue
            progress.tick(f"load test {result.variant_id} {policy.policy_id} at {rate:g} req/s")
            val = validate_policy(adapter, policy.serve_policy,
                                  state.options.scenario.traffic, rate, state.options.data.inputs,
                                  duration_s=seconds, seed=state.options.seed)
            key = validation_key(result.variant_id, policy.policy_id, label)
            validations[key] = val
            if label == "mean":
                policy.validated_mean = val.stats
            else:
                policy.validated_peak = val.stats


def token_lengths(adapter: Adapter, inputs: Sequence[Any]) -> list[int] | None:
    texts = [x for x in inputs if is_text_input(x)]
    if not texts or not hasattr(adapter, "token_lengths"):
        return None
    max_len = getattr(getattr(adapter, "pre", None), "max_length", None)
    lengths = np.asarray(adapter.token_lengths(texts))
    return list(np.minimum(lengths, max_len) if max_len else lengths)
