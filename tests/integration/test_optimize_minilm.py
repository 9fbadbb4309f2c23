"""The real minilm run in CI, with a short budget: the recommendation meets the scenario's
quality floor, report.json keeps its contracts (provenance, serve), and the HTML report opens
in headless Chromium without console errors. Speed is shown by benchmarks/optimize_minilm.py,
never asserted here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chromium import assert_console_check_fires, chromium, open_page
from run_checks import assert_judged_or_stopped, assert_recommendation_follows_the_measurements

from infertune.cli import main
from infertune.config import ServePolicy
from infertune.report.provenance import assert_all_figures_have_provenance

SCENARIO = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "minilm-cpu.yaml"


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_minilm_quick_run_recommends_a_variant_that_meets_the_floor(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    # 90 s: on a 2-core AVX2 EPYC the per-channel INT8 variant is screened and judged with 55 s
    # of it left, and the run ends with 23 s left (session 4, `--quick --budget 90s`)
    rc = main(["optimize", "minilm", "--scenario", str(SCENARIO), "--quick", "--budget", "90s",
               "--out", str(out)])
    assert rc == 0
    assert "report.html" in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    assert_all_figures_have_provenance(report)
    ServePolicy(**report["serving"]["policy"])
    vid = report["recommendation"]["variant_id"]
    folder = out / "variants" / vid
    assert (folder / "manifest.json").is_file()
    # per-channel INT8 of minilm keeps mean cosine ~0.992-0.994 whichever scheme the CPU takes
    # (issue 13's measurements): it is always built; judged, it passes the 0.99 floor, unless
    # screening stopped it as a clear loser on speed on this CPU (then never judged, and
    # run.json and the notes say so)
    int8 = "ort_int8_dynamic_per_channel"
    if assert_judged_or_stopped(out, report, int8) == "judged":
        quality = json.loads((out / "variants" / int8 / "quality.json").read_text())
        assert quality["floor_check"]["ci_low"] >= 0.99
    # the run's own rule, read back from run.json: a recommended variant passed the floor and
    # was measurably faster; the baseline is kept only when no survivor was both
    assert assert_recommendation_follows_the_measurements(out, report) == vid
    if vid != "torch_fp32":  # a recommended variant meets the floor on held-out data
        quality = json.loads((folder / "quality.json").read_text())
        assert quality["verdict"] == "pass"
        assert quality["floor_check"]["ci_low"] >= 0.99
    _renders_in_chromium(out / "report.html", tmp_path)


def _renders_in_chromium(html: Path, tmp: Path) -> None:
    exe = chromium()
    page = open_page(exe, tmp, html.resolve().as_uri(), "--dump-dom")
    assert page.returncode == 0, page.stderr[-2000:]
    assert page.console == []
    assert_console_check_fires(exe, tmp, html)  # the check above can fire
    assert "<svg" in page.dom
