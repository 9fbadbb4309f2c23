"""Run an app under uvicorn with the shutdown behaviour serving needs.

On SIGTERM/SIGINT uvicorn closes the listening socket (no new connections), lets every
in-flight request finish (no graceful-shutdown timeout: an accepted request is never cut off),
and only then runs the app's lifespan shutdown, which drains the queue and the batcher.
"""

from __future__ import annotations

from typing import Any

import uvicorn

DEFAULT_HOST = "127.0.0.1"  # loopback unless the operator asks for more


def run_server(app: Any, *, host: str = DEFAULT_HOST, port: int = 8000,
               log_level: str = "warning") -> None:
    """Serve ``app`` until SIGTERM/SIGINT; returns after the graceful drain."""
    # imported on use: infertune.measure's __init__ loads scipy.stats (about half a second),
    # and every serve process imports this module, spawned model workers included, which
    # never run a server
    from infertune.measure.collector import freeze_startup_objects

    # a full collection over torch's and the model's objects once stalled every request in
    # flight for ~200 ms (p99 270-315 ms in one step of benchmarks/serve_goodput.py)
    freeze_startup_objects()

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on",
                            timeout_graceful_shutdown=None, access_log=False)
    uvicorn.Server(config).run()

