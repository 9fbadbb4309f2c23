"""The HTML report opens in headless Chromium, offline, with its plots drawn and no console
errors. In CI (CI=true) a missing Chromium is a failure, not a skip."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest
from services import missing_service

from infertune.report.render import write_report

SAMPLES = Path(__file__).resolve().parents[1] / "unit" / "report" / "report_samples.py"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--enable-logging=stderr",
                  "--v=0"]


def _chromium() -> str:
    path = shutil.which("chromium") or (
        "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if path is None:
        missing_service("chromium not installed here; run scripts/ensure_services.sh")
    return path


def _measured_report():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("infertune_report_samples", SAMPLES)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.build_measured_report()


def _run(chromium: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'profile'}",
                           *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.slow
@pytest.mark.timing_free
def test_html_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    chromium = _chromium()
    html = write_report(_measured_report(), tmp_path / "run", formats=("html",))["html"]
    url = html.resolve().as_uri()
    dom = _run(chromium, tmp_path, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [ln for ln in dom.stderr.splitlines() if "CONSOLE" in ln]
    assert console == []
    assert dom.stdout.count("<svg") == 4
    assert "<h2>Summary</h2>" in dom.stdout and "Latency CDF of the variants" in dom.stdout
    shot = tmp_path / "shot.png"
    res = _run(chromium, tmp_path, f"--screenshot={shot}", "--window-size=1200,1600", url)
    assert res.returncode == 0, res.stderr[-2000:]
    assert [ln for ln in res.stderr.splitlines() if "CONSOLE" in ln] == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
