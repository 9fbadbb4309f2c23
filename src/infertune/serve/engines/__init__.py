"""Serving engines: where the one serving runtime (serve.app.create_app) runs.

    local   one uvicorn process (serve.server.run_server), the default
    ray     a Ray Serve application, replicas autoscaled on queue length (ray_engine, replica;
            they need the `ray` extra, so the CLI imports them only when chosen)

``autoscale`` (pure) derives Ray Serve's autoscaling settings from measurements; ``run_facts``
reads those measurements from a run folder; ``shed_policy`` is the autoscaling policy Ray's
controller runs (its queue-length rule, raised while replicas refuse traffic).
"""
