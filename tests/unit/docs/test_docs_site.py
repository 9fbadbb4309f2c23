"""The user's guide: the README stays a short guide, and the docs site builds with
`mkdocs build --strict` (a broken link, or a page left out of the nav, fails it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
MAX_README_WORDS = 1500


def test_the_docs_site_builds_strict(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
         "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "python-api" / "index.html").is_file()


def test_every_page_is_in_the_nav() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def pages(items: list) -> list[str]:
        found: list[str] = []
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            found += pages(value) if isinstance(value, list) else [value]
        return found

    listed = pages(config["nav"])
    on_disk = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert sorted(listed) == on_disk


def test_the_readme_is_a_short_guide() -> None:
    text = README.read_text()
    assert len(text.split()) <= MAX_README_WORDS  # as `wc -w README.md` counts
    assert "DESIGN.md" not in text
    assert not re.search(r"\bissue \d+", text, re.IGNORECASE)


def test_the_readme_links_only_pages_that_exist() -> None:
    for target in re.findall(r"\]\((docs/[^)#]+)", README.read_text()):
        assert (ROOT / target).is_file(), target
