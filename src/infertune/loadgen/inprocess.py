"""Load-test a model without HTTP: the Adapter behind serve's own runtime (``ServeRuntime``:
bounded priority queue with deadlines, padding-aware dynamic batcher, worker threads or worker
processes, warm-up), in this process. There is one batching implementation in infertune, and
this is it: what ``loadtest MODEL`` and ``optimize`` measure is what ``infertune serve`` runs,
less the HTTP parsing and the socket.

Each ``send`` is one single-input request, answered as serve answers it: "200", or the HTTP
status serve would send (the queue's own refusals and sheds, e.g. 429 when it is full and 503
when a deadline cannot be met; "422" an input the model fails on; "500" a failed batch). The
runtime's stage times come back as the reply's server timings (queue, preprocess, inference,
postprocess, in ms).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from infertune.config import ServePolicy
from infertune.hardware import detect
from infertune.loadgen.targets import Reply
from infertune.models.adapter import Adapter
from infertune.serve.batcher import BatchFailed, InputFailed
from infertune.serve.model_processes import ModelSource
from infertune.serve.prometheus_metrics import ServeMetrics
from infertune.serve.queue import Rejected
from infertune.serve.request_validation import PredictRequest
from infertune.serve.runtime import ServeRuntime, to_jsonable
from infertune.serve.warmup import prime_on_this_thread
from infertune.serve.worker_threads import fit_to_workers

READY_POLL_S = 0.005


class InProcessTarget:
    """An Adapter served by a ServeRuntime in this process; inputs taken round-robin."""

    shares_process = True  # the runner must not busy-wait: the workers need the GIL

    def __init__(self, adapter: Adapter, policy: ServePolicy, inputs: Sequence[Any],
                 name: str | None = None, clock: Callable[[], float] = time.monotonic,
                 model_source: ModelSource | None = None, cores: int | None = None) -> None:
        if len(inputs) == 0:
            raise ValueError("InProcessTarget needs at least one input")
        # the workers' intra-op threads as serve sizes them (an onnxruntime session shared by
        # several workers is reopened with cores // workers threads; serve/worker_threads.py)
        cores = cores if cores is not None else detect(with_gpus=False).effective_cores
        adapter, _ = fit_to_workers(adapter, policy, cores)
        self.adapter = adapter
        self.policy = policy
        # as a request body carries them (arrays as lists): serve keys its cache and checks
        # its inputs on JSON values, whatever produced them
        self.inputs = [to_jsonable(x) for x in inputs]
        self.name = name or f"in-process:{adapter.info.id}"
        self.clock = clock
        self.metrics = ServeMetrics()
        # model_source: batches run in worker processes when the policy's worker_kind says so
        # (auto: eager torch), as serve runs them; without it, on worker threads here
        self.runtime = ServeRuntime(adapter, policy, clock=clock, metrics=self.metrics,
                                    model_source=model_source)
        self._opened: float | None = None  # when the warm-up ended
        self._closed: float | None = None
        self._busy_at_open = 0.0
        self._batches_at_open = (0.0, 0.0)

    async def open(self) -> None:
        """Start the runtime on this event loop and wait for its warm-up (every batch size
        through the worker threads, as serve does), so start-up stays out of the figures."""
        if self.policy.warmup and self.runtime.processes is None:
            prime_on_this_thread(self.adapter)
        await self.runtime.start()
        while not self.runtime.ready:
            if self.runtime.warmup_error is not None:
                await self.runtime.stop()
                raise RuntimeError(f"{self.name}: {self.runtime.warmup_error}")
            await asyncio.sleep(READY_POLL_S)
        self._busy_at_open = self._busy_s()
        self._batches_at_open = self._batch_counts()
        self._opened = self.clock()

    async def send(self, index: int) -> Reply:
        request = PredictRequest(inputs=[self.inputs[index % len(self.inputs)]])
        try:
            result = await self.runtime.predict(request, self.clock())
        except Rejected as exc:
            return Reply(str(exc.status))
        except InputFailed:
            return Reply("422")
        except BatchFailed:
            return Reply("500")
        return Reply("200", {stage: seconds * 1000.0 for stage, seconds in result.timings.items()})

    async def close(self) -> None:
        self._closed = self.clock()
        await self.runtime.stop()

    def _busy_s(self) -> float:
        batcher = self.runtime.batcher
        return batcher.busy_s if batcher is not None else 0.0

    def _batch_counts(self) -> tuple[float, float]:
        registry = self.metrics.registry
        count = registry.get_sample_value("infertune_batch_size_count") or 0.0
        total = registry.get_sample_value("infertune_batch_size_sum") or 0.0
        return count, total

    def mean_batch_size(self) -> float:
        """Inputs per model call since the warm-up ended (0 when no batch ran)."""
        count, total = self._batch_counts()
        count -= self._batches_at_open[0]
        total -= self._batches_at_open[1]
        return total / count if count > 0 else 0.0

    def utilisation(self) -> float | None:
        """Busy worker-time over workers x the time between open and close."""
        if self._opened is None:
            return None
        span = (self._closed if self._closed is not None else self.clock()) - self._opened
        if span <= 0:
            return None
        return (self._busy_s() - self._busy_at_open) / (self.policy.workers * span)
