"""optimize --server-cmd against the shipped LLM server (python -m infertune.loadgen.llmserver,
a random-weight Llama on 127.0.0.1, one process per candidate): the search over
--max-num-seqs 1,4,16 recommends the highest measured goodput and its verdicts reproduce when
the winner is measured again in a fourth start, at figures of the confirmation's size; a shared
prefix against --prefix-cache lowers TTFT and the report
says so. Each server start imports torch (5-15 s on a busy 2-core machine), so these are slow;
probes are 2-4 s at a few requests per second."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from infertune.cli import main
from infertune.loadgen.openai import OpenAITarget, run_stream_records
from infertune.loadgen.runner import RunOptions
from infertune.loadgen.schedules import ScheduleSpec, build_schedule
from infertune.loadgen.streaming_result import parse_slos, summarise_streams
from infertune.loadgen.workloads import WorkloadSpec, build_prompts
from infertune.optimize.server_tune.process import ServerProcess, free_port
from infertune.optimize.server_tune.tune_report import Figure, ServerTuneReport

pytestmark = pytest.mark.slow
SERVER = (f"{sys.executable} -m infertune.loadgen.llmserver --port {{port}} --hidden-size 64 "
          "--layers 2 --heads 4 --max-positions 512 --max-num-seqs {max_num_seqs}")
SLO = "ttft_p95_ms=250,itl_p95_ms=25"
WORKLOAD = {"prompt_tokens": 16, "output_tokens": 32, "count": 512}


def _same_size(confirmed: Figure, fourth: Figure) -> bool:
    """The fourth start's interval meets the confirmation's, widened by a factor of two either
    way for the spread between starts of one server (its scheduling pauses differ start to
    start); what it catches is a fourth start far from the three, as from a winner command
    line that does not start the server the confirmation measured."""
    assert confirmed.low is not None and confirmed.high is not None
    assert fourth.low is not None and fourth.high is not None
    return confirmed.low / 2 <= fourth.high and fourth.low <= confirmed.high * 2


@pytest.mark.timeout(600)
def test_search_over_max_num_seqs_recommends_the_highest_goodput_and_reproduces(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "chat.yaml"
    scenario.write_text(yaml.safe_dump({"model": {"task": "generation"},
                                        "deployment": {"cost_per_hour_usd": 0.8}}))
    out = tmp_path / "run"
    rc = main(["optimize", "--server-cmd", SERVER, "--search", "max_num_seqs=1,4,16",
               "--scenario", str(scenario), "--slo", SLO, "--rate", "3",
               "--probe-duration", "2s", "--sweep-steps", "2", "--shape", "constant",
               "--prompt-tokens", "16", "--output-tokens", "32", "--warmup-requests", "3",
               "--confirm-requests", "60", "--out", str(out), "--json"])
    assert rc == 0
    assert json.loads(capsys.readouterr().out) == json.loads((out / "server_tune.json").read_text())
    report = ServerTuneReport.load(out / "server_tune.json")
    assert report.runtime == "infertune llmserver"
    assert report.rounds[0].ran == ["max_num_seqs=1", "max_num_seqs=4", "max_num_seqs=16"]
    assert sorted(c.id for c in report.candidates) == sorted(report.rounds[0].ran)
    assert [c.rank for c in report.candidates] == [1, 2, 3]
    winner = report.candidates[0]
    assert winner.id == report.winner_id and winner.chosen_rate is not None
    assert winner.goodput_rps == max(c.goodput_rps for c in report.candidates)
    for c in report.candidates:  # cost at the goodput that met the SLO, memory measured
        if c.goodput_rps > 0:
            assert c.cost_per_1k_usd == pytest.approx(0.8 / (c.goodput_rps * 3600) * 1000)
        assert c.peak_rss_mib is not None and c.peak_rss_mib > 100  # torch and a model
        if c.round_reached < len(report.rounds) - 1:  # pruned: its sweep was cut short
            assert len(c.probes) <= report.rounds[c.round_reached].max_steps
    md = (out / "server_tune.md").read_text()
    assert report.winner_command is not None and report.winner_command in md
    assert f"| 1 | `{winner.id}` | {winner.goodput_rps:.2f} |" in md

    # the winner confirmed in three fresh starts, 60 requests each, at its chosen rate
    confirmed = report.confirmation
    assert confirmed is not None and winner.chosen_rate is not None
    # the chosen rate, or a lower passing one where a confirmation above it missed
    assert confirmed.rate in [p.rate for p in winner.probes if p.passed]
    assert [c.rate for c in report.confirmations_missed] == sorted(
        (p.rate for p in winner.probes if p.passed and confirmed.rate < p.rate
         <= winner.chosen_rate), reverse=True)
    assert [s.sent for s in confirmed.sessions] == [60, 60, 60]
    assert len(confirmed.verdicts) == 2 and "## Confirmation" in md
    assert confirmed.ttft is not None and confirmed.itl is not None

    # the winner measured again, from its command line, as the confirmation measured it. Its
    # verdicts reproduce: each SLO the confirmation said it meets, the fourth start meets. Its
    # figures are of the same size, not inside the confirmation's intervals: those bound the
    # pooled percentile of three starts, not where a fourth start lands (with three exchangeable
    # starts a fourth lies outside their range half the time). In CI a fourth start's ITL p95
    # was 1.16 ms [1.13, 1.19] against the confirmation's 1.63 [1.41, 9.69]: the same verdict,
    # below the lowest of the three starts.
    port = free_port()
    argv = [w.replace("{port}", str(port)) for w in shlex.split(report.winner_command)]
    prompts = build_prompts(WorkloadSpec(**WORKLOAD))  # type: ignore[arg-type]
    with ServerProcess(argv, port, tmp_path / "again.log", ready_timeout_s=120) as server:
        url = server.base_url + "/v1/chat/completions"
        for spec, share in ((ScheduleSpec(shape="constant", rate=3, duration_s=1.0), prompts),
                            (ScheduleSpec(shape="constant", rate=confirmed.rate,
                                          duration_s=60 / confirmed.rate), prompts[3:])):
            target = OpenAITarget(url, "openai-chat", share)
            load, records = run_stream_records(build_schedule(spec), target, RunOptions())
    again = summarise_streams("openai-chat", load, records, parse_slos(SLO))
    assert again.ttft is not None and again.itl is not None
    fourth = {"ttft": again.ttft.percentiles["p95"], "itl": again.itl.percentiles["p95"]}
    for slo, verdict in zip(parse_slos(SLO), confirmed.verdicts, strict=True):
        if verdict == "meets":
            assert fourth[slo.metric].value <= slo.limit_ms, (slo.key, fourth[slo.metric])
    for before, after in ((confirmed.ttft.p95, fourth["ttft"]), (confirmed.itl.p95, fourth["itl"])):
        assert _same_size(before, Figure(value=after.value, low=after.low, high=after.high)), \
            (before, after)


@pytest.mark.timeout(400)
def test_a_shared_prefix_lowers_ttft_against_a_prefix_cache(tmp_path: Path) -> None:
    server = (f"{sys.executable} -m infertune.loadgen.llmserver --port {{port}} "
              "--hidden-size 256 --layers 2 --heads 4 --max-positions 1024 --prefix-cache "
              "--max-num-seqs {seqs}")
    out = tmp_path / "run"
    rc = main(["optimize", "--server-cmd", server, "--search", "seqs=4",
               "--slo", "ttft_p95_ms=5000", "--rate", "4", "--probe-duration", "4s",
               "--sweep-steps", "1", "--shape", "constant", "--prompt-tokens", "8",
               "--output-tokens", "4", "--prefix-tokens", "120", "--prefix-share", "1",
               "--prompt-count", "128", "--warmup-requests", "3", "--confirm-sessions", "0",
               "--out", str(out)])
    assert rc == 0
    report = ServerTuneReport.load(out / "server_tune.json")
    effect = report.prefix_effect
    assert effect is not None and effect.rate == 4.0
    assert effect.shared is not None and effect.unshared is not None
    assert effect.verdict == "lower", effect.statement
    assert effect.shared.p50.high is not None and effect.unshared.p50.low is not None
    assert effect.shared.p50.high < effect.unshared.p50.low
    # what was sent: the same lengths, one shared prefix against none
    assert effect.shared_reuse.share > 0.8 and effect.unshared_reuse.share < 0.05
    # what the server did: its own count of prompt tokens answered from its cache
    assert effect.shared_cached_share is not None and effect.shared_cached_share > 0.8
    assert effect.unshared_cached_share == 0.0
    md = (out / "server_tune.md").read_text()
    assert "## Shared prefix" in md and "TTFT was lower with the shared prefix" in md
