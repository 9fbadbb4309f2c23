"""``infertune optimize --server-cmd ... --search ...``: start each candidate's server, drive the
scenario's prompt mix open-loop, sweep the rate to the SLO, prune by sequential halving
(halving.py), and write server_tune.json / server_tune.md into the run folder.

Per session (one server start): wait for readiness, send ``warmup_requests`` requests whose
figures are dropped (first calls pay allocation and lazy initialisation), then run the
probes the search asks for. Each probe takes the next prompts of the list, not the first ones
again, so a server's prefix cache never sees a probe's prompts before the probe (unless the
list wraps around: then the report's prefix reuse says so, as it counts what was sent).

The winner is then confirmed: measured at its chosen rate in ``confirm_sessions`` fresh
server processes of ``confirm_requests`` requests each, its TTFT and ITL percentiles given with
intervals that count processes (measure/summary.py grouped_quantile_ci), so they hold for a
next start of the same command, and a verdict per SLO from those intervals; where one misses,
at the next lower passing rate of its sweep (at most CONFIRM_RATES rates): the report's
confirmation is the rate that holds, and the misses above it are listed.

With a shared prefix in the workload the winner is measured once more at its chosen rate, with
the same prompts and with each prompt given a prefix of its own (same lengths), and the report
states whether TTFT was lower with the shared prefix, from the CIs of the two medians.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from infertune.hardware import detect
from infertune.loadgen.llm_sweep import judge
from infertune.loadgen.openai import Api, OpenAITarget, Prompt, TokenCounter, run_stream_records
from infertune.loadgen.runner import RunOptions
from infertune.loadgen.schedules import ScheduleSpec, build_schedule
from infertune.loadgen.streaming_result import (
    StreamingResult,
    StreamRecord,
    TokenSLO,
    summarise_streams,
)
from infertune.loadgen.workloads import WorkloadSpec, build_prompts, prefix_reuse
from infertune.measure.summary import LatencySummary, percentile_key
from infertune.optimize.server_tune.command import Candidate, ServerCommand
from infertune.optimize.server_tune.halving import CandidateRun, RunAt, halving_search
from infertune.optimize.server_tune.process import MIB, ServerProcess, free_port
from infertune.optimize.server_tune.tune_report import (
    CandidateResult,
    Confirmation,
    Percentiles,
    PrefixEffect,
    ProbeRow,
    RoundRow,
    ServerTuneReport,
    WorkloadFacts,
    render_markdown,
)

# rates a confirmation tries, from the chosen one down, before it reports the last one's miss
CONFIRM_RATES = 3
ROUTES = {"openai-chat": "/v1/chat/completions", "openai-completions": "/v1/completions"}
Progress = Callable[[str], None]


@dataclass(frozen=True)
class TuneOptions:
    command: ServerCommand
    slos: list[TokenSLO]
    workload: WorkloadSpec
    out: Path
    api: Api = "openai-chat"
    start_rate: float = 1.0
    max_steps: int = 4
    probe_s: float = 10.0
    warmup_requests: int = 4
    shape: str = "poisson"
    ready_path: str = "/v1/models"
    ready_timeout_s: float = 120.0
    seed: int = 0
    cost_per_hour_usd: float | None = None
    model_name: str | None = None
    count_tokens: TokenCounter | None = None
    lengths_label: str = "fixed"
    timeout_s: float = 120.0
    confirm_sessions: int = 3  # fresh starts of the winner; 0: none (figures stay hints)
    confirm_requests: int = 100  # per confirming start


@dataclass
class _Probe:
    result: StreamingResult
    row: ProbeRow
    records: list[StreamRecord]


class Tuner:
    """The live state of one tuning run: the prompts, the servers' memory, every probe."""

    def __init__(self, options: TuneOptions, progress: Progress | None = None) -> None:
        self.o = options
        self.progress = progress or (lambda _: None)
        self.prompts = build_prompts(options.workload)
        self.rows: dict[tuple[str, float], ProbeRow] = {}
        self.peak_rss: dict[str, int] = {}

    @contextlib.contextmanager
    def session(self, candidate: Candidate) -> Iterator[Callable[..., _Probe]]:
        """Start ``candidate``'s server, warm it up; yield probe(rate, prompts=None); stop it."""
        o, port = self.o, free_port()
        log = o.out / "logs" / f"{_safe(candidate.id)}.log"
        self.progress(f"starting {candidate.id}: {o.command.line(candidate, port)}")
        server = ServerProcess(o.command.argv(candidate, port), port, log,
                               ready_path=o.ready_path, ready_timeout_s=o.ready_timeout_s)
        with server:
            sent = [0]

            def probe(rate: float, count: int | None = None,
                      prompts: list[Prompt] | None = None) -> _Probe:
                spec = ScheduleSpec(shape=o.shape if count is None else "constant", rate=rate,
                                    duration_s=o.probe_s if count is None else count / rate,
                                    seed=o.seed)
                schedule = build_schedule(spec)
                share = _rotate(prompts or self.prompts, sent[0])
                sent[0] += len(schedule)
                target = OpenAITarget(server.base_url + ROUTES[o.api], o.api, share,
                                      model=o.model_name, timeout_s=o.timeout_s,
                                      count_tokens=o.count_tokens)
                load, records = run_stream_records(schedule, target, RunOptions(seed=o.seed))
                result = summarise_streams(o.api, load, records, o.slos, seed=o.seed)
                return _Probe(result, _row(rate, result, records, share), records)

            if o.warmup_requests:
                probe(max(o.start_rate, 1.0), o.warmup_requests)
            try:
                yield probe
            finally:
                self.peak_rss[candidate.id] = max(self.peak_rss.get(candidate.id, 0),
                                                  server.peak_rss_bytes)

    @contextlib.contextmanager
    def search_session(self, candidate: Candidate) -> Iterator[RunAt]:
        with self.session(candidate) as probe:
            def run_at(rate: float) -> StreamingResult:
                self.progress(f"  {candidate.id}: probe at {rate:g} req/s")
                done = probe(rate)
                self.rows[(candidate.id, rate)] = done.row
                self.progress(f"  {candidate.id} at {rate:g} req/s: goodput "
                              f"{done.result.goodput_rps:.2f} req/s, "
                              f"{'passed' if done.row.passed else done.row.why}")
                return done.result

            yield run_at

    def run(self) -> ServerTuneReport:
        o = self.o
        o.out.mkdir(parents=True, exist_ok=True)
        outcome = halving_search(o.command.candidates(), self.search_session,
                                 start_rate=o.start_rate, max_steps=o.max_steps,
                                 tiebreak=lambda c: -float(self.peak_rss.get(c.id, 0)))
        # the search's order, which already holds the tie-breaks: the report renders it
        results = [self._result(r).model_copy(update={"rank": i + 1})
                   for i, r in enumerate(outcome.runs)]
        winner = results[0] if results and results[0].chosen_rate is not None else None
        report = ServerTuneReport(
            machine=_machine(), command_template=o.command.template,
            runtime=o.command.runtime.name if o.command.runtime else None,
            search=o.command.search, slos=[f"{s.key}<={s.limit_ms:g}" for s in o.slos],
            workload=self._facts(), start_rate=o.start_rate, max_steps=o.max_steps,
            cost_source=(f"the scenario's ${o.cost_per_hour_usd:g}/h over the measured goodput "
                         "at the SLO" if o.cost_per_hour_usd is not None else
                         "not shown: the scenario states no deployment.cost_per_hour_usd"),
            rounds=[RoundRow(number=r.number, max_steps=r.max_steps, ran=r.ran, kept=r.kept)
                    for r in outcome.rounds],
            candidates=results, winner_id=winner.id if winner else None,
            winner_command=winner.command if winner else None,
            notes=_notes(results, len(self.prompts)))
        if winner is not None and o.confirm_sessions > 0:
            *stepped, report.confirmation = self.confirm(winner)
            report.confirmations_missed = stepped
        if winner is not None and o.workload.prefix_share > 0:
            report.prefix_effect = self.prefix_effect(winner)
        report.save(o.out / "server_tune.json")
        (o.out / "server_tune.md").write_text(render_markdown(report), encoding="utf-8")
        return report

    def _result(self, run: CandidateRun) -> CandidateResult:
        assert run.sweep is not None
        rows = [self.rows[(run.candidate.id, p.rate)] for p in run.sweep.probes]
        chosen = run.sweep.best_rate
        at = next((r for r in rows if r.rate == chosen), None) if chosen is not None else \
            min(rows, key=lambda r: r.rate, default=None)
        goodput = at.goodput_rps if at is not None and chosen is not None else 0.0
        cost = self.o.cost_per_hour_usd
        rss = self.peak_rss.get(run.candidate.id)
        return CandidateResult(
            id=run.candidate.id, knobs=run.candidate.knobs,
            command=self.o.command.line(run.candidate), rank=0, round_reached=run.last_round,
            sessions=run.sessions, sweep_stopped=run.sweep.stopped, probes=rows,
            chosen_rate=chosen, goodput_rps=goodput, at_chosen=at,
            cost_per_1k_usd=(cost / (goodput * 3600.0) * 1000.0
                             if cost is not None and goodput > 0 else None),
            peak_rss_mib=rss / MIB if rss else None)

    def _facts(self) -> WorkloadFacts:
        w, o = self.o.workload, self.o
        return WorkloadFacts(api=o.api, prompt_tokens=w.prompt_tokens,
                             output_tokens=w.output_tokens, prompts=len(self.prompts),
                             prefix_tokens=w.prefix_tokens, prefix_share=w.prefix_share,
                             turns=w.turns, lengths=o.lengths_label, probe_s=o.probe_s,
                             warmup_requests=o.warmup_requests)

    def confirm(self, winner: CandidateResult) -> list[Confirmation]:
        """The winner in fresh server processes at its chosen rate, then, while a confirmation
        misses an SLO, at its next lower passing rate (the sweep doubles, so its highest
        passing rate can sit at the edge of capacity, where one start holds the SLO and the
        next queues up: TTFT p95 8.6 ms in the search's start, 1.6 s over three fresh ones).
        Returns every confirmation, the one that holds (or the last tried) last."""
        assert winner.chosen_rate is not None
        o = self.o
        candidate = Candidate(id=winner.id, knobs=winner.knobs)
        rates = sorted((p.rate for p in winner.probes
                        if p.passed and p.rate <= winner.chosen_rate), reverse=True)
        done: list[Confirmation] = []
        for rate in rates[:CONFIRM_RATES]:
            runs: list[_Probe] = []
            for k in range(o.confirm_sessions):
                self.progress(f"confirming {winner.id} at {rate:g} req/s: start {k + 1} of "
                              f"{o.confirm_sessions}, {o.confirm_requests} requests")
                with self.session(candidate) as probe:
                    runs.append(probe(rate, o.confirm_requests))
            done.append(_confirmation(rate, o.confirm_requests, runs, o.slos))
            if "misses" not in done[-1].verdicts:
                break
        return done

    def prefix_effect(self, winner: CandidateResult) -> PrefixEffect:
        """The winner's TTFT with the shared prefix against the same prompts without it."""
        assert winner.chosen_rate is not None
        rate = winner.chosen_rate
        candidate = Candidate(id=winner.id, knobs=winner.knobs)
        unshared = build_prompts(replace(self.o.workload, prefix_share=0.0))
        self.progress(f"prefix check: {winner.id} at {rate:g} req/s, with and without the "
                      "shared prefix")
        # one server: the own prefixes of the unshared prompts match nothing the shared run
        # left in its cache (each starts with its own number), nor the other way round
        with self.session(candidate) as probe:
            unshared_run = probe(rate, prompts=unshared)
            shared_run = probe(rate)
        return _effect(rate, shared_run.row, unshared_run.row, self.o.workload)


def tune(options: TuneOptions, progress: Progress | None = None) -> ServerTuneReport:
    return Tuner(options, progress).run()


def _rotate(prompts: list[Prompt], offset: int) -> list[Prompt]:
    k = offset % len(prompts)
    return prompts[k:] + prompts[:k]


def _row(rate: float, result: StreamingResult, records: list[StreamRecord],
         prompts: list[Prompt]) -> ProbeRow:
    passed, why, _ = judge(result, 0.01)
    cached = [(r.cached_tokens, r.prompt_tokens) for r in records if r.ok]
    known = cached and all(c is not None and p for c, p in cached)
    return ProbeRow(
        rate=rate, passed=passed, why=why, sent=result.load.sent, ok=result.load.ok,
        goodput_rps=result.goodput_rps, goodput_share=result.goodput_share,
        ttft=Percentiles.of(result.ttft), itl=Percentiles.of(result.itl),
        tpot=Percentiles.of(result.tpot), e2e=Percentiles.of(result.load.latency),
        prefix_reuse=prefix_reuse(prompts, len(records)),
        cached_token_share=(sum(c or 0 for c, _ in cached) / sum(p or 0 for _, p in cached)
                            if known else None))


def _confirmation(rate: float, requests: int, runs: list[_Probe],
                  slos: list[TokenSLO]) -> Confirmation:
    """Figures over every confirming start, each start one group of the intervals."""
    ok = [[r for r in run.records if r.ok] for run in runs]
    per_start = {
        "ttft": [[v for r in rs if (v := r.ttft_ms) is not None] for rs in ok],
        "itl": [[g for r in rs for g in r.gaps_ms] for rs in ok],
        "tpot": [[v for r in rs if (v := r.tpot_ms) is not None] for rs in ok],
        "e2e": [[r.e2e_ms for r in rs] for rs in ok]}
    summaries = {metric: LatencySummary.from_groups(groups) if any(groups) else None
                 for metric, groups in per_start.items()}
    verdicts, words = [], []
    for slo in slos:
        summary = summaries.get(slo.metric)
        figure = summary.percentiles.get(percentile_key(slo.percentile)) if summary else None
        if figure is None or figure.low is None or figure.high is None:
            verdict = "not shown"
        else:
            verdict = ("meets" if figure.high <= slo.limit_ms else
                       "misses" if figure.low > slo.limit_ms else "not shown")
        verdicts.append(verdict)
        shown = (f"{figure.value:.2f} [{figure.low:.2f}, {figure.high:.2f}] ms"
                 if figure is not None and figure.low is not None and figure.high is not None
                 else "not measured")
        words.append(f"{slo.key} {shown} against {slo.limit_ms:g}: {verdict}")
    passed = sum(run.row.passed for run in runs)
    statement = (f"Confirmed in {len(runs)} fresh server starts at {rate:g} req/s, {requests} "
                 f"requests each (95% intervals across the starts): " + "; ".join(words) +
                 f". {passed} of {len(runs)} starts met every SLO on their own.")
    return Confirmation(rate=rate, requests=requests, sessions=[run.row for run in runs],
                        ttft=Percentiles.of(summaries["ttft"]),
                        itl=Percentiles.of(summaries["itl"]), verdicts=verdicts,
                        statement=statement)


def _effect(rate: float, shared: ProbeRow, unshared: ProbeRow,
            workload: WorkloadSpec) -> PrefixEffect:
    a, b = shared.ttft, unshared.ttft
    verdict = "not shown"
    if a is not None and b is not None and a.p50.high is not None and b.p50.low is not None:
        if a.p50.high < b.p50.low:
            verdict = "lower"
        elif a.p50.low is not None and b.p50.high is not None and a.p50.low > b.p50.high:
            verdict = "not lower"
    figures = (f"TTFT p50 {a.p50.text()} ms with it against {b.p50.text()} ms without"
               if a is not None and b is not None else "TTFT was not measured")
    cached = (f"; the server reported {shared.cached_token_share:.0%} of prompt tokens "
              f"served from its cache with it, {unshared.cached_token_share or 0:.0%} without"
              if shared.cached_token_share is not None else "")
    words = {"lower": "lower with the shared prefix (the 95% CIs of the medians do not "
                      "overlap)",
             "not lower": "higher with the shared prefix (the CIs do not overlap)",
             "not shown": "no difference shown (the CIs overlap)"}[verdict]
    statement = (f"A shared prefix of {workload.prefix_tokens} words before "
                 f"{workload.prefix_share:.0%} of the prompts, at {rate:g} req/s: TTFT was "
                 f"{words}. {figures}. {shared.prefix_reuse.share:.0%} of the characters sent "
                 "had been sent before in the same run with the shared prefix, "
                 f"{unshared.prefix_reuse.share:.0%} without{cached}.")
    return PrefixEffect(rate=rate, shared=a, unshared=b, shared_reuse=shared.prefix_reuse,
                        unshared_reuse=unshared.prefix_reuse,
                        shared_cached_share=shared.cached_token_share,
                        unshared_cached_share=unshared.cached_token_share, verdict=verdict,
                        statement=statement)


def _notes(results: list[CandidateResult], distinct: int) -> list[str]:
    notes = []
    if results and results[0].chosen_rate is None:
        notes.append("no candidate met the SLOs at any probed rate; start lower with --rate "
                     "or relax the SLOs")
    wrapped = [c.id for c in results for p in c.probes if p.sent > distinct]
    if wrapped:
        notes.append(f"some probes sent more requests than the {distinct} distinct prompts "
                     f"({', '.join(sorted(set(wrapped)))}), so repeats could be answered "
                     "from a prefix cache; pass --prompt-count higher for a fair test")
    return notes


def _machine() -> str:
    hw = detect()
    gpus = ", ".join(g.name for g in hw.gpus)
    return f"{hw.cpu_model}, {hw.effective_cores} cores" + (f", {gpus}" if gpus else "")


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_.=" else "_" for ch in name)
