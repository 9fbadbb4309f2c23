"""advise: the reranker structure test (issue #8's 'done when'), and advice that fits each
kind of scenario the tests write: LLM chat, CNN on an edge device, already inside the SLO,
and only a model and an SLO."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from infertune.cli import main
from infertune.config import load_scenario
from infertune.report.advisor import advise
from infertune.report.next_steps import GUARDRAILS
from infertune.report.provenance import assert_all_figures_have_provenance
from infertune.report.render_md import SUMMARY_END, render_markdown, summary_word_count

RERANKER = Path(__file__).resolve().parents[3] / "examples" / "scenarios" / "reranker-t4.yaml"
TABLE_HEAD = "| # | Option | Impact | Effort | Risk | How to verify |"


def test_reranker_t4_report_structure(capsys) -> None:
    assert main(["advise", str(RERANKER)]) == 0
    md = capsys.readouterr().out
    summary = md.split(SUMMARY_END)[0]
    statement = re.search(r"\*\*The problem\.\*\* (.+)", summary).group(1)
    assert "480" in statement and "150" in statement and "T4" in statement
    assert statement.count(". ") == 0 and statement.endswith(".")  # one sentence
    assert "spiky" in statement and "720" in statement
    for goal in ("- Latency goal:", "- Throughput goal:", "- Cost goal:"):
        assert goal in summary
    assert TABLE_HEAD in summary
    rows = [ln for ln in summary.splitlines() if re.match(r"\| \d+ \|", ln)]
    assert len(rows) == 5 and all(ln.count("|") == 7 for ln in rows)
    steps = re.findall(r"^(\d)\. \*\*", summary.split("**First week.**")[1], re.M)
    assert steps == ["1", "2", "3"]
    for sentence in GUARDRAILS:
        assert sentence in summary
    # every figure printed in the summary carries its label
    figures = re.findall(r"[+\u2212]?\d[\d.,]*(?: to [+\u2212]?\d[\d.,]*)?%? [^|;\n]*?\((estimate|"
                         r"measured)\)", summary)
    assert len(figures) == 7  # two diagnosis figures and one impact per table row
    for row in rows:  # each impact cell is a labelled estimate range
        assert re.search(r"\| p95 \u2212\d+ to \u2212?\d+% \(estimate\) \|", row), row
    assert "(measured)" not in summary
    assert summary_word_count(md) < 700
    assert "```" not in summary  # no code in the summary


def test_reranker_options_fit_a_t4(capsys) -> None:
    report = advise(load_scenario(RERANKER))
    ids = [o.id for o in report.options]
    assert ids[0] == "fp16-gpu"
    assert "bf16" not in ids and "kv-cache" not in ids and "int8-cpu" not in ids
    assert {"dynamic-batching", "bounded-queue", "tensorrt"} <= set(ids)
    tensorrt = next(o for o in report.options if o.id == "tensorrt")
    assert "no tensorrt experience" in tensorrt.effort.reason
    assert report.diagnosis.items[0].stage == "queueing"
    assert report.diagnosis.items[0].likelihood == "dominant"
    assert report.diagnosis.figures["requests_in_flight_at_mean"].value == 7.35
    assert report.diagnosis.figures["kingman_wait_at_70pct"].low == 4.96
    assert report.problem.inside_slo is False
    data = report.to_dict()
    assert_all_figures_have_provenance(data)
    assert all(o["source"] == "estimate" for o in data["options"])


LLM = {
    "model": {"name": "chat-7b", "family": "transformer-decoder", "task": "generation",
              "framework": "pytorch"},
    "deployment": {"target": "server", "hardware": {"gpu": "A100", "cpu": "AMD EPYC"}},
    "current": {"p50_ms": 900, "p95_ms": 2500, "p99_ms": 4000, "rps": 12},
    "inputs": {"typical": {"batch_size": 1, "seq_len": 1500}},
    "slo": {"p95_ms": 1500},
    "traffic": {"pattern": "bursty", "mean_rps": 12, "peak_rps": 40},
    "constraints": {"cost_ceiling_usd_per_1k": 0.5},
}


def test_llm_chat_gets_kv_prefix_cache_and_continuous_batching(write_scenario) -> None:
    report = advise(load_scenario(write_scenario(LLM)))
    ids = {o.id for o in report.options}
    assert {"kv-cache", "prefix-cache", "continuous-batching", "bf16"} <= ids
    assert not ids & {"dynamic-batching", "micro-batching", "embedding-cache", "int8-cpu"}
    assert "token-by-token" in next(i.reason for i in report.diagnosis.items
                                    if i.stage == "forward pass")
    assert "time to first token" in " ".join(report.measurement_plan.log_per_stage)


def test_cnn_on_edge_device_gets_no_redis_autoscaling_or_kv_cache(write_scenario) -> None:
    edge = {"model": {"name": "mobilenet", "family": "cnn", "task": "detection",
                      "framework": "onnx"},
            "deployment": {"target": "edge", "hardware": {"gpu": "Jetson Orin"}},
            "current": {"p95_ms": 60, "rps": 15}, "slo": {"p95_ms": 33},
            "traffic": {"pattern": "steady", "mean_rps": 15}}
    report = advise(load_scenario(write_scenario(edge)))
    ids = {o.id for o in report.options}
    assert not ids & {"response-cache-shared", "autoscale-queue", "kv-cache", "prefix-cache",
                      "isolation", "bf16"}
    assert {"fp16-gpu", "int8-gpu"} <= ids
    md = render_markdown(report)
    assert "Redis" not in md and "utoscal" not in md


def test_inside_slo_says_so_and_turns_to_cost(write_scenario) -> None:
    ok = {"model": {"family": "transformer-encoder", "task": "embedding", "framework": "pytorch"},
          "deployment": {"target": "container", "hardware": {"cpu": "Intel Xeon Ice Lake"},
                         "cost_per_hour_usd": 0.2},
          "current": {"p50_ms": 8, "p95_ms": 12, "p99_ms": 20, "rps": 30},
          "slo": {"p95_ms": 50, "p99_ms": 80},
          "traffic": {"pattern": "steady", "mean_rps": 30, "peak_rps": 45}}
    report = advise(load_scenario(write_scenario(ok)))
    assert report.problem.inside_slo is True
    assert "already inside its SLO" in report.problem.statement
    assert "cost" in report.problem.statement
    assert "cost per request" in report.first_week[0].detail
    md = render_markdown(report).split(SUMMARY_END)[0]
    first_row = next(ln for ln in md.splitlines() if ln.startswith("| 1 |"))
    assert "cost" in first_row and "p95" not in first_row
    costs = [o.impact.cost.mid for o in report.options if o.impact.cost]
    assert report.options[0].impact.cost is not None and costs


def test_only_model_and_slo_lists_missing_facts_and_assumptions(write_scenario, capsys) -> None:
    path = write_scenario({"model": {"family": "transformer-encoder", "task": "classification"},
                           "slo": {"p95_ms": 100}})
    report = advise(load_scenario(path))
    assert [m.fact for m in report.missing_facts] == [
        "deployment", "current", "hardware", "inputs", "traffic", "constraints"]
    assert all(m.would_change and m.assumption for m in report.missing_facts)
    assert any("generic x86-64 CPU" in a for a in report.assumptions)
    assert report.hardware.startswith("an assumed generic x86-64")
    assert "no stated current latency" in report.problem.statement
    assert main(["advise", str(path)]) == 0
    md = capsys.readouterr().out
    summary = md.split(SUMMARY_END)[0]
    assert summary.index("**Missing facts**") < summary.index("**Where the time goes.**")
    assert "- hardware: assumed a generic x86-64 CPU" in summary
    assert summary_word_count(md) < 700


def test_json_and_html_formats(tmp_path, capsys) -> None:
    assert main(["advise", str(RERANKER), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == "infertune.report/v1"
    assert_all_figures_have_provenance(data)
    out = tmp_path / "advice.html"
    assert main(["advise", str(RERANKER), "--format", "html", "--out", str(out)]) == 0
    assert capsys.readouterr().out == ""
    assert out.read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("content, expected", [
    ("model: [unclosed\n", "not valid YAML at line"),
    ("model: {family: transformer}\n", "model.family = 'transformer' is not allowed"),
    ("current: {p50_ms: 300, p99_ms: 200}\n", "p99_ms (200.0) is below p50_ms (300.0)"),
])
def test_bad_scenarios_exit_1_with_one_line(tmp_path, capsys, content, expected) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    assert main(["advise", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and expected in captured.err


def test_bad_format_and_measure_not_built(capsys) -> None:
    assert main(["advise", str(RERANKER), "--format", "pdf"]) == 1
    assert "use one of md, html, json" in capsys.readouterr().err
