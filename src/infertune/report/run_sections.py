"""The sections of a run's Report (schema infertune.report/v1), each built from what the run
measured (optimize's RunState): the variants and policies tables, the diagnosis, the ranked
options and the recommendation. Every number goes into a Figure with its provenance; nothing
here formats what the renderers would recompute. run_report.py hands them to the one report
builder (assemble.py), which adds the knowledge base's options and ranks them all."""

from __future__ import annotations

from typing import Any

import numpy as np

from infertune.config import ServePolicy
from infertune.measure.diagnosis import stage_likelihood
from infertune.optimize.record import RunRecord
from infertune.optimize.search.choice import (
    common_baseline_ms,
    floor_margin,
    measured_winner,
    objective_key,
    recommended_candidate,
    variant_impact,
)
from infertune.optimize.search.timing import Candidate, Timing
from infertune.optimize.served.confirm import served_goodput
from infertune.optimize.served.policy_sweep import PolicyResult, SimStats
from infertune.optimize.stages.sweep import serve_deadline_ms
from infertune.optimize.state import floor_for
from infertune.report import run_options as opt
from infertune.report.figure_sources import PROFILE, SERVING, quality_artifact, timing_artifact
from infertune.report.knowledge import HardwareProfile
from infertune.report.options import rank_options as rank_all
from infertune.report.schema import (
    Diagnosis,
    DiagnosisItem,
    Figure,
    Option,
    Percentiles,
    PolicyRow,
    Rated,
    Recommendation,
    Serving,
    VariantRow,
    Verdict,
)


def _pcts(t: Timing, hw: str, artifact: str, base: bool = False,
          what: str = "") -> Percentiles:
    vals = (t.base_p50_ms, t.base_p95_ms, t.base_p99_ms) if base else (t.p50_ms, t.p95_ms,
                                                                        t.p99_ms)
    return Percentiles(**{k: Figure.measured(round(v, 3), "ms", hw, t.samples, what=what,
                                             artifact=artifact)
                          for k, v in zip(("p50", "p95", "p99"), vals, strict=True)})


def variant_rows(run: RunRecord) -> list[VariantRow]:
    hw = run.profiling.hardware_label
    rows: list[VariantRow] = []
    ref = next((c for c in run.screen.candidates if c.best_timing), None)
    if ref is not None and ref.best_timing is not None:
        rows.append(VariantRow(variant_id=run.build.baseline_variant_id or "baseline",
                               title="baseline (as given)", latency=_pcts(
                                   ref.best_timing, hw, timing_artifact(run, ref.variant_id),
                                   base=True, what="baseline side of the A/B"),
                               quality_verdict="pass", notes="the reference for quality"))
    for c in run.screen.candidates + run.models.candidate_models:
        t = c.best_timing
        if t is None:
            continue
        quality = (Figure.measured(round(c.quality_value, 5), "", hw,
                                   run.quality_count, what="held-out quality",
                                   artifact=quality_artifact(run, c.variant_id))
                   if c.quality_value is not None else None)
        verdict: Verdict = ("pass" if c.quality_verdict == "pass" else
                            "fail" if c.quality_verdict == "fail" else "unknown")
        timed = timing_artifact(run, c.variant_id)
        latency = _pcts(t, hw, timed, what=f"{t.kind} A/B")
        rows.append(VariantRow(
            variant_id=c.variant_id, title=c.title, latency=latency,
            throughput=Figure.measured(round(1000.0 / t.p50_ms, 2), "requests/s per worker",
                                       hw, t.samples, what="from p50", artifact=timed,
                                       inputs=[f for f in (latency.p50,) if f is not None]),
            quality=quality, quality_metric=_floor_text(run), quality_verdict=verdict,
            notes=c.dropped))
    return rows


def _floor_text(run: RunRecord) -> str:
    return floor_for(run.scenario, run.task).text()


def policy_rows(run: RunRecord) -> list[PolicyRow]:
    sw = run.sweep.sweep
    if sw is None:
        return []
    hw = run.profiling.hardware_label
    basis = f"queueing simulator fed with service times measured on {hw}"
    rows = []
    # the winning finalist's policies first, then the other finalists' (joint search)
    sweeps = [sw] + [f for f in run.sweep.finalist_sweeps if f.variant_id != sw.variant_id]
    price = stated_price(run)
    for s, r in ((one, r) for one in sweeps for r in one.ranked):
        def pc(stats: SimStats, validated: Any) -> Percentiles:
            if validated is not None:
                return Percentiles(**{k: Figure.measured(round(validated.percentile(k), 3), "ms",
                                                         hw, max(validated.requests, 1),
                                                         what="open-loop in-process load test",
                                                         artifact=SERVING)
                                      for k in ("p50", "p95", "p99")
                                      if np.isfinite(validated.percentile(k))})
            return Percentiles(**{k: Figure(value=round(stats.percentile(k), 3), unit="ms",
                                            source="estimate", basis=basis)
                                  for k in ("p50", "p95", "p99")
                                  if np.isfinite(stats.percentile(k))})
        goodput = (Figure(value=round(r.goodput_rps, 2), unit="requests/s", source="estimate",
                          basis=basis + "; highest rate that keeps the SLO, by bisection")
                   if r.goodput_rps is not None else None)
        rows.append(PolicyRow(
            policy_id=r.policy_id, variant_id=s.variant_id,
            settings={k: r.policy[k] for k in ("max_batch_size", "max_wait_ms", "workers",
                                               "max_queue")},
            at_mean=pc(r.at_mean, r.validated_mean), at_peak=pc(r.at_peak, r.validated_peak),
            goodput=goodput,
            cost_per_1k=Figure(value=round(r.cost_per_1k_usd, 6), unit="USD per 1,000 requests",
                               source="estimate", basis="cost_per_hour_usd from the scenario "
                               "divided by the simulated goodput",
                               inputs=[f for f in (goodput, price) if f is not None])
            if r.cost_per_1k_usd is not None else None,
            # measured when load-tested at peak, else the simulator's answer
            meets_slo=(r.validated_peak or r.at_peak).meets(s.slo)))
    return rows


def stated_price(run: RunRecord) -> Figure | None:
    """The scenario's cost per hour, the stated input every cost per 1,000 requests derives
    from (None when the scenario states none)."""
    hourly = run.scenario.deployment.cost_per_hour_usd
    if hourly is None:
        return None
    return Figure(value=hourly, unit="USD per hour", source="estimate",
                  basis="stated in the scenario (deployment.cost_per_hour_usd)")


def diagnosis(run: RunRecord) -> Diagnosis:
    prof, hw = run.profiling.profile, run.profiling.hardware_label
    if prof is None:
        return Diagnosis(summary="not measured: the baseline profile did not run (see notes)")
    st = prof.stages
    n = st.summaries["e2e"].count
    items = []
    for stage in ("preprocess", "forward", "postprocess", "overhead"):
        share = st.share_p50.get(stage, 0.0)
        items.append(DiagnosisItem(
            stage=stage, likelihood=stage_likelihood(st, stage),
            reason=f"{share:.0f}% of the typical request, {st.share_p99.get(stage, 0):.0f}% "
                   "of the slowest 1%",
            time=Figure.measured(round(st.stage_ms(stage, tail=False), 3), "ms", hw, n,
                                 what="mean in the p40-p60 band", artifact=PROFILE),
            share=Figure.measured(round(share, 1), "% of p50", hw, n, artifact=PROFILE)))
    e2e = st.summaries["e2e"]
    qvc = _queueing_text(run)
    return Diagnosis(
        summary=(f"At batch 1 the baseline spends most of a typical request in {st.dominant_p50}"
                 f" and most of its slowest 1% in {st.dominant_p99}."),
        items=items,
        figures={"baseline_p50": Figure.measured(round(e2e.p50, 3), "ms", hw, n,
                                                 artifact=PROFILE),
                 "baseline_p99": Figure.measured(round(e2e.p99, 3), "ms", hw, n,
                                                 artifact=PROFILE)},
        queueing_vs_compute=qvc,
        p50_vs_p99=" ".join([f"p99 is {e2e.p99 / e2e.p50:.1f}x p50 unloaded."]
                            + [_sentence(d) for d in prof.diagnosis[:2]]))


def _sentence(text: str) -> str:
    """The profile's diagnosis lines as sentences ("forward dominates" -> "Forward ...")."""
    text = text.strip()
    text = text[:1].upper() + text[1:]
    return text if text.endswith(".") else text + "."


def _queueing_text(run: RunRecord) -> str:
    sw = run.sweep.sweep
    if sw is None:
        return "not measured: no serving sweep ran"
    best = sw.best
    base = run.sweep.curve.latency_ms(1) if run.sweep.curve is not None else None
    peak = best.validated_peak or best.at_peak
    if base is None:
        return ""
    return (f"at the peak rate ({sw.peak_rps:g} req/s) the chosen policy's p99 is "
            f"{peak.p99_ms:.1f} ms against a forward time of {base:.1f} ms at batch 1: the "
            f"difference is queueing and batching delay")


def measured_options(run: RunRecord) -> tuple[list[Option], frozenset[str]]:
    """The options the run measured (or simulated from its measurements), unranked, and the
    knowledge entries they cover (measured beats estimated for the same thing)."""
    hw = run.profiling.hardware_label
    options: list[Option] = []
    kinds: set[str] = set()
    variant_opts = variant_options(run)
    options += variant_opts
    if variant_opts:
        kinds.add("variant")
    if run.sweep.sweep is not None:
        o = opt.policy_option(run.sweep.sweep, hw, bool(run.sweep.validations))
        if o is not None:
            options.append(o)
            kinds.add("policy")
    io = run.inputs.input_options
    if io is not None:
        cache = opt.cache_option(io.cache, None) if io.cache is not None else None
        if cache is not None:
            options.append(cache)
            kinds.add("cache")
        low = Rated(level="low", reason="a preprocessing setting")
        if io.trimming is not None:
            options.append(opt.timed_option(
                "input-trimming", f"Trim inputs to {io.trim_length} tokens "
                f"({(io.truncated_share or 0):.1%} of held-out inputs would be cut)",
                io.trimming, hw, low, Rated(level="medium", reason="cut text can change the "
                                            "output; check quality on long inputs"),
                "re-run the quality check with the trimmed max length"))
            kinds.add("trimming")
        batching = run.sweep.sweep is not None and run.sweep.sweep.best.policy["max_batch_size"] > 1
        if io.bucketing is not None and not batching:
            b = io.bucketing
            run.log.notes.append(
                f"length bucketing: length-sorted batches of 8 took {b.ratio_p95:.2f}x the p95 "
                f"time of batches in arrival order (measured, {b.samples} batches each), but "
                "the chosen serving policy does not batch, so it does not apply; it matters "
                "once requests are batched")
        elif io.bucketing is not None:
            options.append(opt.bucketing_option(io.bucketing, hw))
    return options, frozenset(opt.skipped_ids(kinds))


def variant_options(run: RunRecord) -> list[Option]:
    """Options for the variants still in the search (dropped ones were dominated or failed the
    floor; the variants table keeps them with the reason)."""
    floor_text = _floor_text(run)
    out = []
    for c in run.screen.candidates:
        if c.best_timing is None or c.dropped:
            continue
        b = run.build.built_variant(c.variant_id)
        out.append(opt.variant_option(c, b.manifest if b else None, floor_margin(run, c),
                                      run.profiling.hardware_label, floor_text,
                                      timing_artifact(run, c.variant_id)))
    return out


def measured_impacts(run: RunRecord, inside: bool | None) -> dict[str, float]:
    """Variant option id -> its ranking impact, scored as optimize's choice scores it (own
    percentile against one common baseline figure), so the top variant option is the variant
    the run chose."""
    key = objective_key(inside, run.scenario.slo.targets())
    by_id = {f"variant-{c.variant_id}": c for c in run.screen.candidates
             if c.best_timing is not None and not c.dropped}
    common = common_baseline_ms(list(by_id.values()), key)
    return {oid: variant_impact(c, key, common) for oid, c in by_id.items()} if common else {}


def rank_options(run: RunRecord, options: list[Option], inside: bool | None) -> list[Option]:
    """``options`` ranked by the one rule both reports use (report/options.py)."""
    return rank_all(options, run.scenario, inside, measured_impacts(run, inside))


def run_hardware(run: RunRecord) -> HardwareProfile:
    """The machine the run measured on, as the knowledge base matches it."""
    return HardwareProfile(description=run.profiling.hardware_label or "this machine",
                           caps=_caps(run))


def _caps(run: RunRecord) -> frozenset[str]:
    hw = run.profiling.hardware
    if hw is None:
        return frozenset({"cpu"})
    caps = {"cpu"} | {f for f in hw.flags}
    if hw.has("avx512_vnni"):
        caps.add("vnni")
    if hw.has("avx512_bf16") or hw.has("amx_bf16"):
        caps.add("cpu_bf16")
    if hw.gpus:
        caps.add("gpu")
    return frozenset(caps)


def recommendation(run: RunRecord, inside: bool | None) -> tuple[Recommendation, Serving]:
    best: Candidate | None = recommended_candidate(run, inside)
    sw = run.sweep.sweep
    policy = sw.best if sw is not None else None
    if best is None:
        vid = run.build.baseline_variant_id
        passing = [c for c in run.screen.candidates
                   if c.quality_verdict == "pass" and not c.is_baseline]
        why = ("no variant was measured; keep the baseline" if not run.screen.candidates else
               "no variant met the quality floor; keep the baseline and take the "
               "non-quantizing options (serving policy, caching, input handling)"
               if not passing else
               "no variant that meets the quality floor was measurably faster than the "
               "baseline here; keep the baseline and take the serving, caching and input "
               "options")
        rec = Recommendation(variant_id=vid, option_id="serving-policy" if policy else None,
                             policy_id=policy.policy_id if policy else None,
                             title="Keep the baseline model", reason=why)
    else:
        t = best.best_timing
        assert t is not None
        key = objective_key(inside, run.scenario.slo.targets())
        own, base = getattr(t, f"{key}_ms"), getattr(t, f"base_{key}_ms")
        rec = Recommendation(
            variant_id=best.variant_id, option_id=f"variant-{best.variant_id}",
            policy_id=policy.policy_id if policy else None, title=best.title,
            reason=(_chosen_by(run) + f" that meets the quality floor ({best.quality_verdict}); "
                    f"{key} {own:.3g} ms against {base:.3g} ms for the baseline "
                    f"({base / own:.1f}x, {t.kind} interleaved A/B, {t.where}, {t.samples} "
                    "samples each)"))
    if policy is not None and sw is not None:
        serving = Serving(variant_id=sw.variant_id, policy_id=policy.policy_id,
                          policy=policy.policy, why=_policy_why(policy, run))
    else:
        # serve always finds a policy here; without a sweep it is the documented default
        reason = next((s.reason for s in run.log.skipped if "sweep" in s.what),
                      "no sweep ran")
        serving = Serving(variant_id=rec.variant_id, policy_id="default",
                          policy=ServePolicy(timeout_ms=serve_deadline_ms(
                              run.scenario.slo.targets())).model_dump(
                              mode="json", exclude_none=True),
                          why=f"not swept ({reason}): ServePolicy defaults, not a measured "
                          "choice")
    return rec, serving


def _policy_why(policy: PolicyResult, run: RunRecord | None = None) -> str:
    order = "meets the SLO at peak first, then at mean, then the lowest tail, then fewest workers"
    served = _served_finalists(run)
    if served:
        return (f"{_served_rule(run)} among the finalists ({served}): each in its own "
                "infertune serve process, over HTTP, in ABBA order (ties: lower cost per 1,000 "
                "requests, then lower risk, then the lower tail); the simulator and the "
                "in-process load tests chose the finalists")
    if policy.validated_peak is not None or policy.validated_mean is not None:
        return (f"best of the load-tested policies by what was measured through serve's "
                f"runtime ({order}); the simulator chose which policies to test")
    return f"best ranked policy of the simulated sweep ({order}); not load-tested"


def _served_finalists(run: RunRecord | None) -> str | None:
    """The finalists confirmed as served, when a winner came out of it."""
    conf = run.confirm.confirmation if run is not None else None
    if conf is None or conf.winner is None:
        return None
    return ", ".join(a.key for a in conf.arms if a.error is None)


def _served_rule(run: RunRecord | None) -> str:
    """How the confirmation as served chose (confirm.choose_winner): by goodput when a finalist
    held the SLO at some rate, else by closeness to it."""
    conf = run.confirm.confirmation if run is not None else None
    slo = run.scenario.slo.targets() if run is not None else {}
    if conf is not None and any(served_goodput(a, slo) > 0 for a in conf.arms if a.at):
        return "highest goodput at the SLO measured as served"
    return ("closest to the SLO measured as served (no finalist held it at any tested rate: "
            "fewest requests shed at peak, then at mean, then the lower tail at peak)")


def _chosen_by(run: RunRecord) -> str:
    served = _served_finalists(run)
    if served and measured_winner(run) is not None:
        return (f"the configuration {_served_rule(run)}, each finalist in its own process "
                f"({served}), a variant")
    if measured_winner(run) is not None:
        ids = ", ".join(s.variant_id for s in run.sweep.finalist_sweeps)
        return (f"the configuration that measured best under the scenario's traffic through "
                f"serve's runtime among the finalists ({ids}), a variant")
    return "top-ranked variant (impact per effort within the risk budget)"
