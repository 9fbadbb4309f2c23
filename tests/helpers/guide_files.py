"""What the user's guide assumes a user has, built in a test's working directory: the
README's scenario.yaml (taken from the README itself), a tiny model.onnx, inputs.npz and
bodies.jsonl; and the fenced blocks the README and docs pages mark with <!-- name -->."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
from onnx_graphs import WIDTH, make_mlp

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def marked_block(page: Path, marker: str) -> str:
    """The fenced block right after ``<!-- marker -->`` on ``page``."""
    found = re.search(rf"<!-- {re.escape(marker)} -->\n```\w*\n(.*?)```", page.read_text(),
                      re.DOTALL)
    assert found, f"{page.name}: no fenced block marked <!-- {marker} -->"
    return found.group(1)


def commands(block: str) -> list[str]:
    """The shell commands of a block: its lines without comments and blank lines."""
    lines = (line.split(" #")[0].strip() for line in block.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def write_guide_files(cwd: Path) -> None:
    """The quickstart's inputs: a 16 -> 8 MLP as model.onnx, 200 seeded inputs, the README's
    scenario, and one request body per line for the HTTP load test."""
    (cwd / "scenario.yaml").write_text(marked_block(README, "scenario.yaml"))
    make_mlp(cwd / "model.onnx")
    rng = np.random.default_rng(3)
    np.savez(cwd / "inputs.npz", inputs=rng.standard_normal((200, WIDTH)).astype(np.float32))
    rows = rng.standard_normal((16, WIDTH)).round(4).tolist()
    (cwd / "bodies.jsonl").write_text("".join(json.dumps({"inputs": [r]}) + "\n" for r in rows))
