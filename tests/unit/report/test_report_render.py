"""Renderers: the Markdown summary/details split and word count, the offline HTML (no scripts,
no network references, plots only where there is data), `infertune report` re-rendering, and
the interactive interview."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from infertune.cli import app, main
from infertune.config import Scenario
from infertune.report.figure_sources import CONFIRMATION
from infertune.report.interview import interview
from infertune.report.render import render, write_report
from infertune.report.render_md import (
    CUT_NOTE,
    SUMMARY_END,
    SUMMARY_WORD_LIMIT,
    _summary,
    render_markdown,
    summary_word_count,
)
from infertune.report.schema import Figure, Percentiles, Report, SloCheck, SloPoint


def test_summary_word_count_counts_only_the_summary_as_wc_does() -> None:
    md = "# Title\n\nOne two three | --- |\n\n" + SUMMARY_END + "\n\nfour five six seven"
    assert summary_word_count(md) == 8  # wc -w: '#', pipes and rules are words too


def served(value: float, unit: str, samples: int) -> Figure:
    return Figure.measured(value, unit, "2-core AMD EPYC (test fixture)", samples,
                           artifact=CONFIRMATION)


def _with_slo_check(report: Report) -> Report:
    """The measured fixture plus what a run adds to the summary: the SLO check at the mean and
    the peak with its verdict and what would meet the SLO (the demo's summary had these)."""
    points = [SloPoint(label=label, offered=served(rate, "requests/s", 800),
                       achieved=served(rate * 0.99, "requests/s", 800),
                       measured=Percentiles(**{k: served(v, "ms", 800) for k, v in
                                               zip(("p50", "p95", "p99"), ms, strict=True)}),
                       shed=served(0.2, "%", 800), meets_slo=ok,
                       goodput=served(rate, "requests/s", 800),
                       cost_per_1k=served(0.0003, "USD", 800))
              for label, rate, ms, ok in (("mean", 20.0, (6.1, 10.2, 13.9), True),
                                          ("peak", 60.0, (7.5, 16.8, 24.0), False))]
    check = SloCheck(variant_id="ort-int8-pc", policy_id="b8-w2", targets={"p95": 15.0},
                     points=points, cost_ceiling=served(0.05, "USD", 1),
                     within_ceiling=True,
                     verdict="The recommended configuration meets the p95 target at the mean "
                             "rate and misses it at the peak, measured as served.",
                     what_would=["two instances at the peak, from the measured goodput of 40 "
                                 "requests/s per instance",
                                 "a max_wait_ms of 1 instead of 2, which the sweep measured "
                                 "at 2 ms less p95 at the peak"])
    return report.model_copy(update={"slo_check": check})


def test_summary_holds_700_words_by_wc_on_a_realistic_report(measured_report) -> None:
    report = _with_slo_check(measured_report)
    assert len("\n".join(_summary(report)).split()) > SUMMARY_WORD_LIMIT  # over without fitting
    md = render_markdown(report)
    summary, details = md.split(SUMMARY_END)
    assert len(summary.split()) <= SUMMARY_WORD_LIMIT  # what `wc -w` reads
    assert summary_word_count(md) == len(summary.split())
    # the least needed blocks moved to the details, in order, each named in the summary
    for block in ("**Measurement plan.**", "**Guardrails.**", "**First week.**"):
        assert block not in summary and block in details
    assert ("The measurement plan, the guardrails and the first week's plan are in the details "
            "(moved to keep this summary within 700 words).") in summary
    assert "5 more options" not in summary and "12 more options are in the details." in summary
    assert "**Recommendation:** ORT INT8 per-channel" in summary
    assert "**At the SLO, measured.**" in summary


def test_summary_under_the_limit_moves_nothing(measured_report) -> None:
    md = render_markdown(measured_report, limit=10_000)
    summary = md.split(SUMMARY_END)[0]
    assert "**Measurement plan.**" in summary and "**Guardrails.**" in summary
    assert "in the details (moved" not in summary


def test_measured_report_markdown(measured_report) -> None:
    md = render_markdown(measured_report)
    summary, details = md.split(SUMMARY_END)
    assert "_Measured on 2-core AMD EPYC (test fixture)" in summary
    assert ("**Recommendation:** ORT INT8 per-channel (variant `ort-int8-pc`). Fastest variant "
            "that meets the floor.") in summary
    assert "### Variants (measured)" in details and "### Serving policies" in details
    assert "| ort-int8-pc | 2.6 ms (measured) | 4 ms (measured) | 5.5 ms (measured) |" in details
    assert "max_batch_size=8, max_wait_ms=2.0, workers=1" in details
    assert summary_word_count(md) < 700


def test_html_is_self_contained_with_plots_for_measured_data(measured_report) -> None:
    html = render(measured_report, "html")
    assert html.count("<svg") == 4
    for title in ("Latency CDF of the variants", "Stage breakdown",
                  "p99 against load for the top serving policies",
                  "Quality against speed (Pareto front)"):
        assert title in html
    assert "<script" not in html.lower()
    assert not re.search(r"(src|href)=\"(https?:)?//", html)  # nothing fetched from the network
    assert "<link" not in html and "@import" not in html
    assert render(measured_report, "html") == html  # deterministic (fixed SVG id salt)


def test_advice_html_leaves_plots_out(measured_report) -> None:
    advice = measured_report.model_copy(update={"plots": type(measured_report.plots)()})
    html = render(advice, "html")
    assert "<svg" not in html and "<h2>Plots</h2>" not in html
    assert "<h2>Summary</h2>" in html and "<h2>Details</h2>" in html


def test_report_command_rerenders_a_run_folder(tmp_path, measured_report, capsys) -> None:
    run = tmp_path / "runs" / "demo"
    measured_report.save_json(run / "report.json")
    assert main(["report", str(run)]) == 0
    assert (run / "report.md").read_text() == render_markdown(measured_report)
    assert (run / "report.html").read_text().startswith("<!DOCTYPE html>")
    capsys.readouterr()
    assert main(["report", str(run / "report.json"), "--format", "json"]) == 0
    assert capsys.readouterr().out == render(measured_report, "json")


def test_report_command_accepts_advise_json_output(tmp_path, capsys) -> None:
    scenario = Path(__file__).resolve().parents[3] / "examples/scenarios/reranker-t4.yaml"
    folder = tmp_path / "advice"
    assert main(["advise", str(scenario), "--format", "json", "--out",
                 str(folder / "report.json")]) == 0
    assert main(["report", str(folder), "--format", "md"]) == 0
    assert "480" in capsys.readouterr().out
    written = write_report(Report.load_json(folder / "report.json"), folder)
    assert sorted(p.name for p in written.values()) == ["report.html", "report.json",
                                                        "report.md"]


def test_report_command_bad_inputs_exit_1(tmp_path, capsys) -> None:
    assert main(["report", str(tmp_path)]) == 1
    assert "report.json not found" in capsys.readouterr().err
    (tmp_path / "report.json").write_text('{"schema": "other"}')
    assert main(["report", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not an infertune.report/v1 report" in err


def test_interview_asks_each_missing_fact_and_reasks_bad_answers() -> None:
    sc = Scenario.from_dict({"model": {"family": "cnn", "task": "detection"},
                             "slo": {"p95_ms": 40}})
    answers = iter(["server",            # deployment.target
                    "fast", "30", "", "", # current p95: not a number, then 30; skip p99, rps
                    "T5", "",            # gpu: unknown, accepted with an assumption; skip cpu
                    "", "",              # inputs skipped
                    "wavy", "spiky", "10", "5",  # pattern bad then ok; mean 10; peak 5 < mean
                    "", "",              # peak skipped after the error; then cost skipped
                    ])
    prompts: list[str] = []
    said: list[str] = []

    def ask(prompt: str) -> str:
        prompts.append(prompt)
        return next(answers)

    done = interview(sc, ask=ask, say=said.append)
    assert done.deployment.target == "server"
    assert done.current.p95_ms == 30 and done.current.rps is None
    assert done.deployment.hardware.gpu == "T5"
    assert done.traffic.pattern == "spiky" and done.traffic.mean_rps == 10
    assert done.traffic.peak_rps is None
    assert prompts[0] == ("Deployment target [server|container|edge|managed-endpoint|"
                          "serverless] (e.g. server; empty to skip)")
    assert said[0] == "'fast' is not a number; e.g. 480"
    assert said[1].startswith("GPU 'T5' is not in the catalogue: assumed a generic GPU")
    assert "accelerator: other" in said[1]  # ... and how to correct it
    assert "traffic.pattern = 'wavy' is not allowed" in said[2]
    assert "peak_rps (5.0) is below mean_rps (10.0)" in said[3]
    assert sc.deployment.target is None  # the input scenario is unchanged


def test_advise_interactive_on_the_command_line(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("model: {family: cnn, task: detection}\nslo: {p95_ms: 40}\n")
    answers = "edge\n\n\n\nJetson Orin\n\n\n\nsteady\n\n\n\n"
    result = CliRunner().invoke(app, ["advise", str(path), "--interactive"], input=answers)
    assert result.exit_code == 0, result.output
    assert "Deployment target [server|" in result.output
    assert "one Jetson Orin" in result.output
    assert "Redis" not in result.output.split(SUMMARY_END)[0]


def test_what_would_meet_the_slo_moves_last_when_the_rest_is_not_enough(
        measured_report) -> None:
    # the demo at 19:54 (every rate missed, four intervals in the verdict, six "what would"
    # lines) still had 736 summary words after the plans and options 4-5 had moved
    report = _with_slo_check(measured_report)
    check = report.slo_check
    assert check is not None
    many = check.model_copy(update={"what_would": [
        f"At the {r} rate the measured {k} is 31.2 ms against the 30 ms target (1.0x) on "
        "this machine, measured as served in its own process" for r in ("mean", "peak")
        for k in ("p50", "p95", "p99")] * 3})
    md = render_markdown(report.model_copy(update={"slo_check": many}))
    summary, details = md.split(SUMMARY_END)
    assert summary_word_count(md) <= SUMMARY_WORD_LIMIT
    assert "**What would meet the SLO:**" not in summary
    assert "**What would meet the SLO:**" in details and many.what_would[0] in details
    assert "and what would meet the SLO are in the details" in summary
    # it stays in the summary while the summary holds it
    md = render_markdown(report)
    assert "**What would meet the SLO:**" in md.split(SUMMARY_END)[0]


def test_a_summary_too_long_after_every_move_is_cut_at_the_limit(measured_report) -> None:
    """Once every movable block has moved, a long problem statement and verdict alone can
    pass the limit: the summary is cut at the limit's last word, with a note saying so."""
    report = _with_slo_check(measured_report)
    check = report.slo_check
    assert check is not None
    long = report.model_copy(update={
        "problem": report.problem.model_copy(update={"statement": "word " * 600}),
        "slo_check": check.model_copy(update={"verdict": "verdict " * 300})})
    md = render_markdown(long)
    summary, details = md.split(SUMMARY_END)
    assert summary_word_count(md) == len(summary.split()) == SUMMARY_WORD_LIMIT
    assert summary.rstrip().endswith(CUT_NOTE.format(limit=SUMMARY_WORD_LIMIT))
    assert "verdict" not in summary  # the verdict comes after the statement: cut off
    assert summary.count(" word") == 600  # the whole statement fits before the limit
    # a limit inside the statement: it is cut within it, with the ellipsis, still at the limit
    md = render_markdown(long, limit=300)
    summary = md.split(SUMMARY_END)[0]
    assert summary_word_count(md) == 300 and "word…" in summary
    # a summary under the limit is not cut
    assert CUT_NOTE.format(limit=SUMMARY_WORD_LIMIT) not in render_markdown(measured_report)
