"""The HTML report opens in headless Chromium, offline, with its plots drawn and no console
errors. In CI (CI=true) a missing Chromium is a failure, not a skip."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from chromium import assert_console_check_fires, chromium, open_page

from infertune.report.render import write_report

SAMPLES = Path(__file__).resolve().parents[1] / "unit" / "report" / "report_samples.py"


def _measured_report():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("infertune_report_samples", SAMPLES)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.build_measured_report()


@pytest.mark.slow
@pytest.mark.timing_free
def test_html_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    exe = chromium()
    html = write_report(_measured_report(), tmp_path / "run", formats=("html",))["html"]
    url = html.resolve().as_uri()
    page = open_page(exe, tmp_path, url, "--dump-dom")
    assert page.returncode == 0, page.stderr[-2000:]
    assert page.console == []
    # the check above can fire: the same report with a console.error planted logs it
    assert_console_check_fires(exe, tmp_path, html)
    assert page.dom.count("<svg") == 4
    assert "<h2>Summary</h2>" in page.dom and "Latency CDF of the variants" in page.dom
    shot = tmp_path / "shot.png"
    res = open_page(exe, tmp_path, url, f"--screenshot={shot}", "--window-size=1200,1600")
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.console == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
