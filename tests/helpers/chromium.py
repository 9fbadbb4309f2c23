"""Headless Chromium for the HTML report tests: open a page offline, return its DOM and the
console lines it logged. ``console_lines`` is checked against a planted console.error, so an
empty list means the page logged nothing, not that the logging was off (with other flags, or
another build, Chromium prints no CONSOLE lines at all and every check would pass)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from services import missing_service

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]
PLANTED = "infertune-planted-console-error"


def chromium() -> str:
    path = shutil.which("chromium") or (
        "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if path is None:
        missing_service("chromium not installed here; run scripts/ensure_services.sh")
    return path


@dataclass(frozen=True)
class Page:
    returncode: int
    dom: str
    console: list[str]
    stderr: str


def open_page(exe: str, tmp: Path, url: str, *args: str, timeout: float = 90) -> Page:
    res = subprocess.run([exe, *FLAGS, f"--user-data-dir={tmp / 'profile'}", *args, url],
                         capture_output=True, text=True, timeout=timeout, check=False)
    console = [ln for ln in res.stderr.splitlines() if ":CONSOLE" in ln or "CONSOLE(" in ln]
    return Page(res.returncode, res.stdout, console, res.stderr)


def assert_console_check_fires(exe: str, tmp: Path, html: Path) -> None:
    """The same page with a console.error planted before </body> logs exactly that line."""
    planted = tmp / "planted.html"
    text = html.read_text(encoding="utf-8")
    planted.write_text(text.replace("</body>", f"<script>console.error('{PLANTED}')</script>"
                                    "</body>", 1), encoding="utf-8")
    page = open_page(exe, tmp, planted.resolve().as_uri(), "--dump-dom")
    assert page.returncode == 0, page.stderr[-2000:]
    assert len(page.console) == 1 and PLANTED in page.console[0], page.stderr[-2000:]
