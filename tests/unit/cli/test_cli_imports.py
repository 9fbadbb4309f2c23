"""What ``import infertune.cli`` (every command module, as ``infertune --help`` loads them)
brings in: none of the heavy modules that cli/ keeps inside the functions that need them
(cli/__init__.py's docstring says why), so the reason for each local import is checked."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "onnxruntime", "onnx", "openvino", "nncf", "ray", "transformers", "redis")


def test_the_command_line_loads_no_heavy_module() -> None:
    probe = ("import sys, infertune.cli; "
             f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == []
