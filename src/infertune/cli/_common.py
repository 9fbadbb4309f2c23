"""Helpers shared by the command modules: JSON output, quiet library logging."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from infertune.libraries import quiet_libraries

__all__ = ["quiet_libraries", "write_json"]


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` as indented JSON, creating the parent folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, sort_keys=False, default=str) + "\n")
