"""Sequential halving over server configurations, on goodput at the SLO.

Each candidate's measurement is an SLO rate sweep (loadgen.llm_sweep: the rate doubles until a
probe misses an SLO, then bisects). Round 0 gives every candidate a sweep of one probe, at the
starting rate; the better half by goodput (rounded up) goes on to round 1, whose sweeps may run
two probes, then four, and so on up to ``max_steps``. Only clear losers are pruned: a
candidate within ``tie_share`` (5%) of the goodput of the last one kept is kept too, since the
goodput of two servers that both met the SLO at the same rate differs by a request or two of
noise, and halving on that would drop a candidate for nothing it did. The search ends when
every survivor has had its full sweep (``max_steps`` probes, or fewer when its sweep ended on
its own), and the best of them wins. So a clear loser costs one short probe, and the budget
goes to the candidates still in contention.

Sweeps are resumed, not restarted: every probe is kept per (candidate, rate), and a later
round's sweep replays the kept probes (a sweep's path depends only on its probes' verdicts) and
measures only the rates it has not seen. A candidate's server is started only when a round
needs a new probe from it, and stopped at the end of its turn in the round, so one server runs
at a time and none is measured while another competes for the CPU.

The score is goodput at the SLO: the goodput (requests per second that met every SLO) of the
highest-rate probe that passed; a candidate with no passing probe scores 0 and is ordered by
the best goodput any of its probes reached. Ties go to the caller's ``tiebreak`` (tuner.py:
the smaller peak memory), so the order the report shows is the order the search decided.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from infertune.loadgen.llm_sweep import SweepResult, sweep
from infertune.loadgen.streaming_result import StreamingResult
from infertune.optimize.server_tune.command import Candidate

RunAt = Callable[[float], StreamingResult]
OpenSession = Callable[[Candidate], AbstractContextManager[RunAt]]
Tiebreak = Callable[[Candidate], float]  # higher is better, among equal scores
TIE_SHARE = 0.05


@dataclass
class CandidateRun:
    candidate: Candidate
    probes: dict[float, StreamingResult] = field(default_factory=dict)
    sweep: SweepResult | None = None  # its latest (longest) sweep
    last_round: int = 0
    sessions: int = 0  # servers started for it

    def score(self) -> tuple[float, float]:
        return score(self.sweep)


def score(found: SweepResult | None) -> tuple[float, float]:
    """(goodput at the SLO, best goodput of any probe): higher is better."""
    if found is None or not found.probes:
        return (0.0, 0.0)
    passing = [p for p in found.probes if p.passed]
    at_slo = max(passing, key=lambda p: p.rate).result.goodput_rps if passing else 0.0
    return (at_slo, max(p.result.goodput_rps for p in found.probes))


@dataclass(frozen=True)
class Round:
    number: int
    max_steps: int
    ran: list[str]  # candidate ids measured in this round
    kept: list[str]  # those that go on (the winner alone after the last round)


@dataclass
class SearchOutcome:
    runs: list[CandidateRun]  # every candidate, best first
    rounds: list[Round]


def halving_search(candidates: list[Candidate], open_session: OpenSession, *,
                   start_rate: float, max_steps: int, tolerance: float = 0.1,
                   max_error_share: float = 0.01,
                   tiebreak: Tiebreak = lambda _: 0.0,
                   tie_share: float = TIE_SHARE) -> SearchOutcome:
    """See the module docstring. ``open_session(candidate)`` starts the candidate's server and
    yields ``run_at(rate)`` (one warmed-up open-loop probe); it is left when the turn ends."""
    runs = {c.id: CandidateRun(c) for c in candidates}
    active = [c.id for c in candidates]
    rounds: list[Round] = []
    steps, number = 1, 0
    while True:
        # the last survivor (or a lone candidate) has no one to be pruned against
        steps = max_steps if len(active) == 1 else min(steps, max_steps)
        for cid in active:
            _turn(runs[cid], open_session, start_rate, steps, tolerance, max_error_share)
            runs[cid].last_round = number
        done = steps >= max_steps or all(_finished(runs[c], steps) for c in active)
        ranked = sorted(active, key=lambda c: (*runs[c].score(),
                                                tiebreak(runs[c].candidate)), reverse=True)
        kept = ranked[:1] if done else _halve(ranked, runs, tie_share)
        rounds.append(Round(number, steps, list(active), kept))
        if done:
            break
        active, steps, number = kept, steps * 2, number + 1
    winner = rounds[-1].kept[0]
    order = sorted(runs.values(), key=lambda r: (r.candidate.id == winner, r.last_round,
                                                 *r.score(), tiebreak(r.candidate)),
                   reverse=True)
    return SearchOutcome(order, rounds)


def _halve(ranked: list[str], runs: dict[str, CandidateRun], tie_share: float) -> list[str]:
    """The better half (rounded up), and any candidate as good as its last one within
    ``tie_share`` (on both parts of the score)."""
    k = math.ceil(len(ranked) / 2)
    floor = runs[ranked[k - 1]].score()
    return ranked[:k] + [c for c in ranked[k:]
                         if all(v >= f * (1 - tie_share) for v, f in
                                zip(runs[c].score(), floor, strict=True))]


def _finished(run: CandidateRun, steps: int) -> bool:
    """Its sweep ended before using its steps (bracketed, or the client could not keep up):
    more steps would measure nothing new."""
    return run.sweep is not None and len(run.sweep.probes) < steps


def _turn(run: CandidateRun, open_session: OpenSession, start_rate: float, steps: int,
          tolerance: float, max_error_share: float) -> None:
    with contextlib.ExitStack() as stack:
        session: list[RunAt] = []

        def run_at(rate: float) -> StreamingResult:
            if rate not in run.probes:
                if not session:  # the first new rate of this turn starts the server
                    session.append(stack.enter_context(open_session(run.candidate)))
                    run.sessions += 1
                run.probes[rate] = session[0](rate)
            return run.probes[rate]

        run.sweep = sweep(run_at, start_rate, max_steps=steps, tolerance=tolerance,
                          max_error_share=max_error_share)
