"""The server-tuning report: typed (one pydantic base, round-tripped by pydantic, never by
hand), written as server_tune.json and rendered to server_tune.md from that JSON alone.

Candidates are in the order the search decided (halving.py): the winner first, then by how far
the search took them, goodput at the SLO, then cost per 1,000 requests, then peak memory. Cost
per 1,000 requests is the scenario's one hourly price over the goodput that met the SLO
(DESIGN.md: never at peak throughput), so it orders as goodput does and breaks no tie of its
own; memory is the measured peak resident set of the server's process tree, the tie-break.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from infertune.loadgen.workloads import PrefixReuse
from infertune.measure.summary import LatencySummary

SCHEMA = "infertune.server-tune/v1"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Figure(_Model):
    value: float
    low: float | None = None
    high: float | None = None

    def text(self) -> str:
        ci = f" [{self.low:.1f}–{self.high:.1f}]" if self.low is not None and \
            self.high is not None else ""
        return f"{self.value:.1f}{ci}"


class Percentiles(_Model):
    count: int
    p50: Figure
    p95: Figure
    p99: Figure

    @classmethod
    def of(cls, summary: LatencySummary | None) -> Percentiles | None:
        if summary is None:
            return None
        p = summary.percentiles
        return cls(count=summary.count, **{k: Figure(value=p[k].value, low=p[k].low,
                                                     high=p[k].high)
                                           for k in ("p50", "p95", "p99")})


class ProbeRow(_Model):
    rate: float  # scheduled requests/s
    passed: bool
    why: str
    sent: int
    ok: int
    goodput_rps: float
    goodput_share: float
    ttft: Percentiles | None
    itl: Percentiles | None
    tpot: Percentiles | None
    e2e: Percentiles | None
    prefix_reuse: PrefixReuse  # what the requests sent shared with earlier ones
    cached_token_share: float | None  # the server's own count of reused prompt tokens


class CandidateResult(_Model):
    id: str
    knobs: dict[str, str]
    command: str  # {port} left as a placeholder
    rank: int
    round_reached: int
    sessions: int
    sweep_stopped: str
    probes: list[ProbeRow]
    chosen_rate: float | None  # its highest passing rate; None: no rate met the SLOs
    goodput_rps: float  # at the SLO: the goodput of the probe at chosen_rate (0 when none)
    at_chosen: ProbeRow | None  # the probe at chosen_rate, else its lowest-rate probe
    cost_per_1k_usd: float | None
    peak_rss_mib: float | None


class Confirmation(_Model):
    """The winner at its chosen rate in fresh server processes, ``requests`` each: figures
    over all of them, intervals that count processes (one process's window misses how much a
    second start differs: ITL p95 4.4 ms in one start against 3.2 and 3.2 in the next two)."""

    rate: float
    requests: int  # per session
    sessions: list[ProbeRow]
    ttft: Percentiles | None
    itl: Percentiles | None
    verdicts: list[str]  # per SLO: "meets", "misses" or "not shown", from the interval
    statement: str


class RoundRow(_Model):
    number: int
    max_steps: int
    ran: list[str]
    kept: list[str]


class PrefixEffect(_Model):
    """The winner at its chosen rate, with the workload's shared prefix and with the same
    prompts each given a prefix of its own (same lengths)."""

    rate: float
    shared: Percentiles | None  # TTFT
    unshared: Percentiles | None
    shared_reuse: PrefixReuse
    unshared_reuse: PrefixReuse
    shared_cached_share: float | None
    unshared_cached_share: float | None
    verdict: str  # "lower", "not lower", "not shown"
    statement: str


class WorkloadFacts(_Model):
    api: str
    prompt_tokens: int
    output_tokens: int
    prompts: int
    prefix_tokens: int
    prefix_share: float
    turns: int
    lengths: str  # how the user-turn lengths were chosen
    probe_s: float
    warmup_requests: int


class ServerTuneReport(_Model):
    schema_id: str = SCHEMA
    machine: str
    command_template: str
    runtime: str | None  # the runtime recognised from the command (knobs checked), if any
    search: dict[str, list[str]]
    slos: list[str]
    workload: WorkloadFacts
    start_rate: float
    max_steps: int
    cost_source: str
    rounds: list[RoundRow]
    candidates: list[CandidateResult]  # ranked, best first
    winner_id: str | None
    winner_command: str | None
    prefix_effect: PrefixEffect | None = None
    confirmation: Confirmation | None = None  # None: --confirm-sessions 0, or no winner
    # higher rates whose confirmation missed an SLO, before ``confirmation``'s (highest first)
    confirmations_missed: list[Confirmation] = []
    notes: list[str] = []

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> ServerTuneReport:
        return cls.model_validate_json(path.read_text(encoding="utf-8"))


def _cell(p: Percentiles | None, key: str) -> str:
    return getattr(p, key).text() if p is not None else "n/a"


def _reuse(at: ProbeRow | None) -> str:
    if at is None:
        return "n/a"
    cached = f" ({at.cached_token_share:.0%})" if at.cached_token_share is not None else \
        " (not reported)"
    return f"{at.prefix_reuse.share:.0%}{cached}"


def render_markdown(report: ServerTuneReport) -> str:
    """server_tune.md, from the report alone (nothing is recomputed here)."""
    lines = [f"# Server tuning: {report.command_template}", "",
             f"Measured on {report.machine}. SLOs: {', '.join(report.slos)}. Each probe: "
             f"{report.workload.probe_s:g} s open-loop ({report.workload.api}, "
             f"{report.workload.warmup_requests} warm-up requests first); sweeps start at "
             f"{report.start_rate:g} req/s, at most {report.max_steps} probe(s).", ""]
    if report.winner_command is not None:
        lines += [f"**Recommended: `{report.winner_id}`** — highest goodput at the SLO.", "",
                  "```", report.winner_command, "```", ""]
    else:
        lines += ["**No configuration met the SLOs** at any probed rate.", ""]
    lines += ["| # | config | goodput at SLO (req/s) | rate (req/s) | TTFT p50 / p95 ms [95% CI] "
              "| ITL p50 / p95 ms [95% CI] | cost / 1k req | peak RSS MiB | prefix reuse sent "
              "(server cached) | round |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for c in report.candidates:
        at = c.at_chosen
        rate = f"{c.chosen_rate:g}" if c.chosen_rate is not None else \
            (f"none met ({at.rate:g} tried)" if at else "n/a")
        cost = f"${c.cost_per_1k_usd:.4f}" if c.cost_per_1k_usd is not None else "not shown"
        rss = f"{c.peak_rss_mib:.0f}" if c.peak_rss_mib is not None else "n/a"
        ttft = f"{_cell(at.ttft, 'p50')} / {_cell(at.ttft, 'p95')}" if at else "n/a"
        itl = f"{_cell(at.itl, 'p50')} / {_cell(at.itl, 'p95')}" if at else "n/a"
        lines.append(f"| {c.rank} | `{c.id}` | {c.goodput_rps:.2f} | {rate} | {ttft} | {itl} | "
                     f"{cost} | {rss} | {_reuse(at)} | {c.round_reached} |")
    lines += ["", f"Cost: {report.cost_source}. Prefix reuse sent: the share of the characters "
              "of the probe's prompts that an earlier request of the same probe had sent; in "
              "brackets, the share of prompt tokens the server says it took from its cache.",
              "", "## Rounds (sequential halving)", ""]
    for r in report.rounds:
        lines.append(f"- round {r.number} (sweeps of up to {r.max_steps} probe(s)): ran "
                     f"{', '.join(r.ran)}; kept {', '.join(r.kept)}")
    if report.confirmation is not None:
        lines += ["", "## Confirmation", "",
                  *[f"- {c.statement}" for c in report.confirmations_missed],
                  *(["- so the rate stepped down:"] if report.confirmations_missed else []),
                  report.confirmation.statement]
    else:
        lines += ["", "The figures above come from one probe window of one server start each: "
                  "hints, not results (no confirmation was run)."]
    if report.prefix_effect is not None:
        lines += ["", "## Shared prefix", "", report.prefix_effect.statement]
    if report.notes:
        lines += ["", "## Notes", "", *[f"- {n}" for n in report.notes]]
    return "\n".join(lines) + "\n"
