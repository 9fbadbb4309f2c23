"""Every option optimize can name, as report Options with impact, effort, risk and how to verify:
measured ones (variants, the serving policy, input trimming and bucketing, cascades) and ones
that cannot be measured here (from the advisor knowledge base, labelled estimate).

Impact figures are percent changes against the baseline (negative latency = faster). Measured
latency changes come from interleaved A/B trials; simulated policy figures are estimates built
from measured service times; knowledge-base ranges are estimates with their source.
"""

from __future__ import annotations

from pathlib import Path

import infertune.optimize
from infertune.models.variant import Manifest
from infertune.optimize.search.choice import Rating, variant_effort, variant_risk
from infertune.optimize.search.timing import Candidate
from infertune.optimize.served.input_options import CacheEstimate, TimedOption
from infertune.optimize.served.policy_sweep import SweepResult
from infertune.report.figure_sources import RUN_JSON
from infertune.report.schema import Figure, Impact, Option, Rated

# the knowledge entries only a run can name (measured-elsewhere options), kept beside the
# passes they describe
KNOWLEDGE_DIR = Path(infertune.optimize.__file__).parent / "knowledge"
# knowledge entries a measured option replaces (measured beats estimated for the same thing)
MEASURED_COVERS = {
    "variant": {"int8-cpu", "ort-fusion", "bf16", "torch-compile", "cpu-threads"},
    "policy": {"micro-batching", "dynamic-batching"},
    "trimming": {"input-trimming"},
    "cascade": {"cascade"},
    "cache": {"embedding-cache", "response-cache-local"},
}


def pct(ratio: float) -> float:
    return round((ratio - 1.0) * 100.0, 1) + 0.0


def rated(rating: Rating) -> Rated:
    return Rated(level=rating.level, reason=rating.reason)


def latency_impact(cand: Candidate, hardware: str, artifact: str) -> Impact:
    """The variant's percent changes against the baseline, each derived from the two measured
    percentiles (its ``inputs``) of the interleaved A/B saved in ``artifact``."""
    t = cand.best_timing
    assert t is not None
    what = (f"{t.kind} interleaved A/B against the baseline ({t.where}), batch 1, "
            "held-out inputs")

    def ms(value: float, side: str) -> Figure:
        return Figure.measured(round(value, 3), "ms", hardware, t.samples,
                               what=f"{side} side of the {what}", artifact=artifact)

    sides = {k: (ms(getattr(t, f"{k}_ms"), "variant"), ms(getattr(t, f"base_{k}_ms"), "baseline"))
             for k in ("p50", "p95", "p99")}

    def fig(ratio: float, key: str, what_else: str = "") -> Figure:
        return Figure.measured(pct(ratio), "% change", hardware, t.samples,
                               what=what_else + what, artifact=artifact,
                               inputs=list(sides[key]))

    p50 = fig(t.ratio_p50, "p50")
    cost = Figure(value=pct(t.ratio_p50), unit="% change in cost per request",
                  source="estimate", basis=f"cost per request on a busy instance scales with the "
                  f"service time; ratio of p50s from the {what} measured on {hardware} with "
                  f"{t.samples} samples", inputs=[p50])
    return Impact(p50=p50, p95=fig(t.ratio_p95, "p95"),
                  p99=fig(t.p99_ms / t.base_p99_ms if t.base_p99_ms else 1.0, "p99"), cost=cost,
                  throughput=fig(t.base_p50_ms / t.p50_ms, "p50",
                                 "single-worker requests/s from p50, "))


def variant_option(cand: Candidate, manifest: Manifest | None, margin: float | None,
                   hardware: str, floor_text: str, artifact: str) -> Option:
    """``artifact``: where the variant's interleaved A/B was saved (report/figure_sources.py)."""
    return Option(
        id=f"variant-{cand.variant_id}", title=f"Serve variant {cand.variant_id}: {cand.title}",
        category="variant", impact=latency_impact(cand, hardware, artifact),
        effort=rated(variant_effort(manifest)),
        risk=rated(variant_risk(cand, margin, manifest)),
        verify=(f"re-run `infertune compare` of the baseline and variants/{cand.variant_id} on "
                f"the production hardware and `infertune validate` with the floor {floor_text} "
                "on fresh held-out data"),
        invalidated_by="other hardware (without the same CPU flags), a new model version, "
                       "inputs much longer than the held-out set",
        applicability=f"measured here; folder variants/{cand.variant_id}", source="measured",
        within_risk_budget=cand.quality_verdict == "pass")


def policy_option(sweep: SweepResult, hardware: str, validated: bool) -> Option | None:
    """The chosen serving policy against no batching at peak (simulated or load-tested)."""
    best = sweep.best
    plain = next((r for r in sweep.ranked if r.policy["max_batch_size"] == 1), None)
    if plain is None or plain.policy_id == best.policy_id:
        return None
    src_best = best.validated_peak if validated and best.validated_peak else best.at_peak
    basis = (f"queueing simulator fed with service times measured on {hardware}; "
             f"{sweep.evaluated} policies at the scenario's traffic shape")
    figs = {}
    for key in ("p50", "p95", "p99"):
        a, b = plain.at_peak.percentile(key), best.at_peak.percentile(key)
        if a and b and a != float("inf") and b != float("inf"):
            figs[key] = Figure(value=pct(b / a), unit="% change at peak", source="estimate",
                               basis=basis)
    knobs = best.policy
    return Option(
        id="serving-policy", title=(f"Dynamic batching: max batch {knobs['max_batch_size']}, "
                                    f"wait {knobs['max_wait_ms']:g} ms, {knobs['workers']} "
                                    f"worker(s), queue {knobs['max_queue']}"),
        category="batching", impact=Impact(**figs),
        effort=Rated(level="low", reason="serving settings; `infertune serve` reads them from "
                     "report.json"),
        risk=Rated(level="low", reason="outputs do not change; the wait window adds latency "
                   "at low load (see the batching table)"),
        verify="open-loop load test at the mean and peak rate with the scenario's traffic "
               "shape (`infertune loadtest`), comparing p95/p99 and goodput with batching off",
        invalidated_by="a different traffic shape or rate; other hardware",
        applicability=f"validated load test p99 at peak {src_best.p99_ms:.1f} ms"
        if validated and best.validated_peak else "simulated; not load-tested",
        source="estimate")


def timed_option(option_id: str, title: str, timed: TimedOption, hardware: str, effort: Rated,
                 risk: Rated, verify: str) -> Option:
    what = f"interleaved A/B ({timed.a_label} vs {timed.b_label})"
    p95, p50 = _timed_changes(timed, hardware, what)
    return Option(id=option_id, title=title, category="inputs", impact=Impact(p50=p50, p95=p95),
                  effort=effort, risk=risk, verify=verify, invalidated_by="a change in the "
                  "input length distribution", source="measured",
                  applicability=timed.detail)


def bucketing_option(timed: TimedOption, hardware: str) -> Option:
    """Length bucketing, an estimate: what was timed is an upper bound, not the gain as served.
    The offline A/B sorts the whole held-out set by length before cutting it into batches, so
    each batch holds near-equal lengths; a server only groups the requests waiting at once,
    and ``infertune serve`` already lets a request join a batch only when its padding costs
    less than a call of its own (serve/batch_shape.py). As served the gain lies between none
    and the offline figure, so that range is the impact (ranked on its middle)."""
    what = f"interleaved A/B ({timed.a_label} vs {timed.b_label})"
    p95, p50 = _timed_changes(timed, hardware, what)
    bound = {"p95": p95, "p50": p50}
    basis = ("estimate: between no change and the upper bound measured offline on "
             f"{hardware} ({timed.samples} batches a side, the whole held-out set sorted by "
             "length before batching); serve already groups requests by padding cost, so the "
             "gain as served was not measured and may be none")
    impact = Impact(**{k: Figure(low=min(f.value or 0.0, 0.0), high=max(f.value or 0.0, 0.0),
                                 unit="% change", source="estimate", basis=basis, inputs=[f])
                       for k, f in bound.items()})
    return Option(id="length-bucketing", title="Group batched requests by length (less "
                  "padding)", category="inputs", impact=impact,
                  effort=Rated(level="low", reason="a preprocessing setting"),
                  risk=Rated(level="low", reason="outputs unchanged"),
                  verify="load test infertune serve with and without length grouping on "
                  "production-like lengths, at the served batch sizes",
                  invalidated_by="a change in the input length distribution", source="estimate",
                  applicability=timed.detail + "; an upper bound: serve already groups "
                  "batched requests by padding cost")


def _timed_changes(timed: TimedOption, hardware: str, what: str) -> tuple[Figure, Figure]:
    """The p95 and p50 changes of an input option's A/B, each derived from the two measured
    percentiles. The input options' timings are saved only in run.json (input_options)."""
    def ms(value: float, label: str, key: str) -> Figure:
        return Figure.measured(round(value, 3), "ms", hardware, timed.samples,
                               what=f"{key} of {label}, {what}", artifact=RUN_JSON)

    p95_sides = [ms(timed.b_p95_ms, timed.b_label, "p95"), ms(timed.a_p95_ms, timed.a_label,
                                                              "p95")]
    p50_sides = [ms(timed.b_p50_ms, timed.b_label, "p50"), ms(timed.a_p50_ms, timed.a_label,
                                                              "p50")]
    p95 = Figure.measured(pct(timed.ratio_p95), "% change", hardware, timed.samples, what=what,
                          artifact=RUN_JSON, inputs=p95_sides)
    p50 = Figure.measured(pct(timed.b_p50_ms / timed.a_p50_ms), "% change", hardware,
                          timed.samples, what=what, artifact=RUN_JSON, inputs=p50_sides)
    return p95, p50


def cache_option(cache: CacheEstimate, model_ms: float | None) -> Option | None:
    """Response cache: the hit rate counted on the data; latency effect an estimate from it."""
    rate = max(cache.exact_hit_rate, cache.normalised_hit_rate)
    basis = (f"hit rate counted on {cache.requests} inputs of {cache.source} replayed in order "
             f"(exact {cache.exact_hit_rate:.1%}, normalised {cache.normalised_hit_rate:.1%}); "
             "a hit skips the model, so mean latency falls by about the hit rate")
    impact = Impact(p50=Figure(low=-round(rate * 100, 1) + 0.0, high=0.0,
                               unit="% change in mean latency", source="estimate", basis=basis))
    return Option(
        id="response-cache", title="In-process response cache keyed on normalised input text",
        category="caching", impact=impact,
        effort=Rated(level="low", reason="`infertune serve` has an LRU; set cache_size"),
        risk=Rated(level="low", reason="identical inputs give identical outputs; the key "
                   "includes the variant id"),
        verify="count repeats in a day of production inputs; watch the cache hit-rate metric",
        invalidated_by="traffic with few repeats (the held-out set may not reflect it)",
        source="estimate")


def skipped_ids(measured_kinds: set[str]) -> set[str]:
    out: set[str] = set()
    for kind in measured_kinds:
        out |= MEASURED_COVERS.get(kind, set())
    return out
