"""infertune: measured, ranked, low-risk changes that cut ML inference latency and cost.

The Python API is ``infertune.api`` (``from infertune import api``: ``api.optimize``,
``api.advise``, ``api.serve``, ``api.loadtest`` with their options and results). It lives in
``infertune/cli/api.py``, beside the commands whose rules it shares, at the top of the layer
order; see that module for why ``optimize`` and ``serve`` are spelled on ``api`` and not on the
package (``infertune.optimize`` and ``infertune.serve`` are the stage packages).

Everything here is re-exported lazily: ``import infertune`` imports nothing but this file, and
no model runtime (onnxruntime, torch) is imported until a call needs one.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from infertune.cli import api as api
    from infertune.cli.api import (
        AdviseOptions,
        LoadtestOptions,
        OptimizeOptions,
        OptimizeResult,
        ServeOptions,
        Server,
        advise,
        loadtest,
    )

# the api itself, and its names that no subpackage of infertune already holds
__all__ = ["AdviseOptions", "LoadtestOptions", "OptimizeOptions", "OptimizeResult",
           "ServeOptions", "Server", "__version__", "advise", "api", "loadtest"]
_FROM_API = frozenset(__all__) - {"__version__", "api"}


def __getattr__(name: str) -> Any:
    if name == "api":
        return importlib.import_module("infertune.cli.api")
    if name in _FROM_API:
        return getattr(importlib.import_module("infertune.cli.api"), name)
    raise AttributeError(f"module 'infertune' has no attribute {name!r}")
