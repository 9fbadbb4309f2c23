"""Sequential halving over server configurations, on goodput at the SLO.

Each candidate's measurement is an SLO rate sweep (loadgen.llm_sweep: the rate doubles until a
probe misses an SLO, then bisects). Round 0 gives every candidate a sweep of one probe, at the
starting rate; the better half by goodput (rounded up) goes on to round 1, whose sweeps may run
two probes, then four, and so on up to ``max_steps``; the search ends when one candidate is left
and has had its full sweep, or when every survivor has had ``max_steps``. So a clear loser
costs one short probe, and the budget goes to the candidates still in contention.

Sweeps are resumed, not restarted: every probe is kept per (candidate, rate), and a later
round's sweep replays the kept probes (a sweep's path depends only on its probes' verdicts) and
measures only the rates it has not seen. A candidate's server is started only when a round
needs a new probe from it, and stopped at the end of its turn in the round, so one server runs
at a time and none is measured while another competes for the CPU.

The score is goodput at the SLO: the goodput (requests per second that met every SLO) of the
highest-rate probe that passed; a candidate with no passing probe scores 0 and is ordered by
the best goodput any of its probes reached. Ties go to the caller's ``tiebreak`` (run.py:
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
                   tiebreak: Tiebreak = lambda _: 0.0) -> SearchOutcome:
    """See the module docstring. ``open_session(candidate)`` starts the candidate's server and
    yields ``run_at(rate)`` (one warmed-up open-loop probe); it is left when the turn ends."""
    runs = {c.id: CandidateRun(c) for c in candidates}
    active = [c.id for c in candidates]
    rounds: list[Round] = []
    steps, number = 1, 0
    while True:
        steps = min(steps, max_steps)
        for cid in active:
            _turn(runs[cid], open_session, start_rate, steps, tolerance, max_error_share)
            runs[cid].last_round = number
        done = steps >= max_steps or all(_finished(runs[c], steps) for c in active)
        ranked = sorted(active, key=lambda c: (*runs[c].score(),
                                                tiebreak(runs[c].candidate)), reverse=True)
        if done and len(active) == 1:
            rounds.append(Round(number, steps, list(active), ranked[:1]))
            break
        kept = ranked if len(active) == 1 else ranked[:math.ceil(len(active) / 2)]
        if done:  # every survivor had its full sweep: the best one wins
            kept = ranked[:1]
        rounds.append(Round(number, steps, list(active), kept))
        if done:
            break
        active, steps, number = kept, steps * 2, number + 1
    winner = rounds[-1].kept[0]
    order = sorted(runs.values(), key=lambda r: (r.candidate.id == winner, r.last_round,
                                                 *r.score(), tiebreak(r.candidate)),
                   reverse=True)
    return SearchOutcome(order, rounds)


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
