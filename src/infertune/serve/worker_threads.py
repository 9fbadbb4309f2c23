"""Intra-op threads per model worker: one rule for serve, optimize's load tests and the exports.

Up to ``workers`` batches run at once, and each runs on a thread pool of its own: a torch
worker process on its intra-op pool, a worker thread of an onnxruntime session on itself plus
the session's pool. W workers of C threads each on C cores oversubscribe them. On a 2-core
AMD EPYC with AVX-512 VNNI (one run, MiniLM per-channel INT8 from `make demo`, two worker
threads calling one session for 4 s): 155 texts/s with the session's default threads (2,
spinning), 178 with spinning off and 188 with one intra-op thread, against 171 for one worker
alone; at batch 4, 140 against 169. Served (the same variant, 2 workers, batches up to 8 with
no wait, Poisson short sentences, ABBA; `benchmarks/worker_threads.py` repeats it), one thread
per worker against two each: p99 45.9 and 60.3 ms against 98.5 and 62.5 ms at 500 req/s, and
at 550 req/s 42.8 and 79.6 ms against 72.2 ms and a failed step (114 ms, 4.3% shed).

The rule: a variant whose manifest fixes its intra-op threads keeps them (the threads pass
built it for that, and the search measured it with each worker count); otherwise the policy's
``model_threads``; otherwise cores // workers. export/deploy_plan.py states the same number for
Triton and Kubernetes, and serve's torch workers use it too (cli/serving.py).
"""

from __future__ import annotations

from infertune.config import ServePolicy
from infertune.models.adapter import Adapter


def threads_per_worker(fixed: int, policy: ServePolicy, cores: int) -> int:
    """Intra-op threads for each worker: ``fixed`` (the variant's own, 0 when it leaves them to
    the runtime), else ``policy.model_threads``, else cores // workers (at least 1)."""
    if fixed > 0:
        return fixed
    if policy.model_threads is not None:
        return policy.model_threads
    return max(1, cores // policy.workers)


def fit_to_workers(adapter: Adapter, policy: ServePolicy, cores: int) -> tuple[Adapter, int | None]:
    """An onnxruntime (or OpenVINO) adapter sized by ``threads_per_worker`` when several
    workers share it or the policy names ``model_threads``, and the threads each worker gets
    (None: left as loaded; a torch model, whose threads are per process, or a runner that
    cannot reopen its session). One worker with no ``model_threads`` keeps the session as
    loaded: the runtime's default is already one thread per core."""
    runner = getattr(adapter, "runner", None)
    opened = getattr(runner, "opened_with", None)
    if adapter.info.runtime not in ("onnxruntime", "openvino") or runner is None \
            or opened is None:
        return adapter, None
    fixed = int(opened.get("intra_op_threads") or 0)
    if policy.workers <= 1 and policy.model_threads is None:
        return adapter, fixed or None
    threads = threads_per_worker(fixed, policy, cores)
    if threads == fixed:
        return adapter, threads
    if adapter.info.runtime == "openvino":
        # one OpenVINO stream per worker, each on its share of the cores: with one stream the
        # workers' calls would queue for it (models/openvino_runner.py)
        return adapter.with_runner(runner.reopen(intra_op_threads=threads,
                                                 streams=policy.workers)), threads
    return adapter.with_runner(runner.reopen(intra_op_threads=threads)), threads
