"""Serving: an ASGI app (starlette, served by uvicorn) with a dynamic batcher, a bounded
priority queue with deadlines, a layered cache (LRU -> Redis), a cascade, Prometheus metrics,
warm-up and graceful shutdown.

    from infertune.serve import create_app, run_server
    app = create_app(infertune.models.load("minilm"), ServePolicy(max_batch_size=16))
    run_server(app, host="127.0.0.1", port=8000)
"""

from infertune.serve.app import create_app, server_timing
from infertune.serve.server import run_server

__all__ = ["create_app", "run_server", "server_timing"]
