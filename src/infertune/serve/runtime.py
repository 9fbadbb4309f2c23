"""The request pipeline behind /v1/predict, independent of HTTP:

    cache lookup (LRU -> Redis) -> cascade's fast model (if the tier uses it)
      -> bounded priority queue -> dynamic batcher -> full model -> cache store

``ServeRuntime.start()`` must run on the serving event loop (the app's lifespan does it); it
starts the batching loop and warm-up. ``stop()`` refuses new requests, drains the queue and
waits for running batches, so no accepted request is lost on shutdown.

Overload protection by default: a request with no ``timeout_ms`` (and a policy with none) gets
the default deadline ``max(50 ms, max_wait_ms + 3 x the full-batch service time)`` from the
moment it enters the queue, the service time measured by the warm-up and then tracked by the
batcher. The queue refuses at once (503) a request the queue ahead would make late, sheds a
queued one whose deadline can no longer be met, and a request still unanswered one batch time
after its deadline is answered 503 (its batch runs on; the result is dropped). Admission counts
the batch running now, the batches queued ahead and the batching window, so admitted requests
finish within the deadline, and the excess is refused at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from infertune.config import ServePolicy
from infertune.models.adapter import Adapter
from infertune.serve.batch_shape import PaddingCost, approx_tokens
from infertune.serve.batcher import (
    Batcher,
    BatchFailed,
    BatchOutcome,
    run_stages,
)
from infertune.serve.cache import MISS, LayeredCache, LRUCache, RedisCache, cache_key, redis_client
from infertune.serve.cascade import Cascade, Tier
from infertune.serve.keep_awake import CoreSpinners
from infertune.serve.model_processes import ModelProcesses, ModelSource, uses_processes
from infertune.serve.prometheus_metrics import STAGES, ServeMetrics
from infertune.serve.queue import Rejected, RequestQueue, ShedReason, WorkItem, queue_bound_advice
from infertune.serve.request_validation import PredictRequest
from infertune.serve.warmup import (
    SHAPE_WARMUP_BUDGET_S,
    full_batch_seconds,
    padding_batches,
    run_warmup,
    shape_batches,
    timed_warmup,
    warm_shapes,
    warmup_batches,
)

log = logging.getLogger("infertune.serve")
DEFAULT_BOUND_BATCHES = 3  # the batch running now, the one queued ahead, the request's own
DEFAULT_BOUND_FLOOR_S = 0.050  # event-loop and HTTP jitter on a busy host is a few ms
ABANDON_GRACE_MIN_S = 0.050


@dataclass
class PredictResult:
    outputs: list[Any]
    cached: list[bool]
    timings: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))


def to_jsonable(value: Any) -> Any:
    """numpy arrays and scalars -> lists and Python numbers (embeddings as lists of floats).
    BatchFailed on NaN or infinity: JSON cannot carry them, and a null in their place would
    pass a broken answer off as a real one."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "fc" and not np.isfinite(value).all():
            raise _non_finite()
        return value.tolist()
    if isinstance(value, np.generic):
        if value.dtype.kind in "fc" and not np.isfinite(value):
            raise _non_finite()
        return value.item()
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    return value


def _non_finite() -> BatchFailed:
    return BatchFailed("NonFiniteOutput", "the model returned NaN or infinity, which JSON "
                       "cannot carry; check the model and its inputs (e.g. an fp16 overflow)")


class ServeRuntime:
    """One served model: queue, batcher, cache and cascade, wired to one metrics registry."""

    def __init__(self, adapter: Adapter, policy: ServePolicy, *, clock: Callable[[], float],
                 metrics: ServeMetrics, redis: Any = None,
                 fast_adapter: Adapter | None = None,
                 model_source: ModelSource | None = None) -> None:
        self.adapter = adapter
        self.policy = policy
        self.clock = clock
        self.metrics = metrics
        self.cascade = (Cascade(fast_adapter, policy.cascade_threshold, policy.cascade_metric)
                        if fast_adapter is not None else None)
        self._redis_client = redis
        self.ready = False
        self.warmup_error: str | None = None
        self.queue: RequestQueue | None = None
        self.batcher: Batcher | None = None
        self.cache: LayeredCache | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self.processes = (ModelProcesses(model_source, policy.workers)
                          if uses_processes(policy.worker_kind, adapter.info.runtime, model_source)
                          and model_source is not None else None)
        self.spinners = CoreSpinners() if policy.keep_cores_awake else None

    @property
    def worker_kind(self) -> Literal["thread", "process"]:
        """Where batches run: "process" or "thread" (the policy's auto resolved)."""
        return "thread" if self.processes is None else "process"

    @property
    def model(self) -> dict[str, str]:
        return {"id": self.adapter.info.id, "version": self.adapter.info.version}

    def default_deadline_s(self) -> float | None:
        """The deadline of a request that names none: the policy's timeout_ms, else the
        overload bound (see the module docstring); None before any service time is known."""
        if self.policy.timeout_ms:
            return self.policy.timeout_ms / 1000
        estimate = self.batcher.batch_estimate() if self.batcher is not None else 0.0
        if estimate <= 0:
            return None
        return max(DEFAULT_BOUND_FLOOR_S,
                   self.policy.max_wait_ms / 1000 + DEFAULT_BOUND_BATCHES * estimate)

    def answer_bound_s(self) -> float | None:
        """The hard cap on an answer's time from entering the queue: the default deadline plus
        the one batch time of grace after which a request still in the model gets 503."""
        deadline = self.default_deadline_s()
        if deadline is None:
            return None
        estimate = self.batcher.batch_estimate() if self.batcher is not None else 0.0
        return deadline + max(ABANDON_GRACE_MIN_S, estimate)

    async def start(self) -> None:
        m = self.metrics
        if self.spinners is not None:
            self.spinners.start()
        self.queue = RequestQueue(
            self.policy.max_queue, clock=self.clock,
            service_estimate=lambda n: self.batcher.size_estimate(n) if self.batcher else 0.0,
            on_shed=lambda reason: m.shed.labels(reason=reason.value).inc(),
            on_depth=m.queue_depth.set,
            # refuse only on lower bounds: what the fastest measured service would still miss
            wait_estimate=lambda n: self.batcher.wait_floor(n) if self.batcher else 0.0,
            service_floor=lambda n: self.batcher.size_floor(n) if self.batcher else 0.0,
            can_start_now=lambda: self.batcher.can_start_now() if self.batcher else False)
        self.batcher = Batcher(self.adapter, self.queue, max_batch_size=self.policy.max_batch_size,
                               max_wait_s=self.policy.max_wait_ms / 1000,
                               workers=self.policy.workers, clock=self.clock, metrics=m,
                               remote=self.processes.run_stages if self.processes else None)
        self.cache = LayeredCache(
            LRUCache(self.policy.cache_size, self.policy.cache_ttl_s, self.clock),
            self._redis_layer(),
            on_lookup=lambda layer, hit: (m.cache_hits if hit else m.cache_misses)
            .labels(layer=layer).inc())
        self._tasks.append(asyncio.create_task(self.batcher.run()))
        self._tasks.append(asyncio.create_task(self._warm()))

    def _redis_layer(self) -> RedisCache | None:
        client = self._redis_client
        if client is None and self.policy.redis_url:
            client = redis_client(self.policy.redis_url, self.policy.redis_timeout_ms / 1000)
        if client is None:
            return None
        errors = self.metrics.cache_errors.labels(layer="redis")
        return RedisCache(client, self.policy.redis_ttl_s, self.clock, on_error=errors.inc,
                          model_id=self.adapter.info.id, version=self.adapter.info.version)

    async def _warm(self) -> None:
        assert self.batcher is not None
        if self.processes is not None:
            try:
                await self.processes.start()
            except Exception as exc:  # noqa: BLE001 - report on /readyz instead of dying
                self.warmup_error = (f"model worker processes failed to start: {exc}; see the "
                                     "server log, or serve with worker_kind: thread")
                log.exception("model worker processes failed to start")
                return
        if self.policy.warmup:
            batches = warmup_batches(self.adapter, self.policy.max_batch_size)
            repeats = padding_batches(batches)  # timed after them, for the padding rule only
            if self.cascade is not None:
                batches_fast = warmup_batches(self.cascade.fast, self.policy.max_batch_size)
            try:
                if self.processes is not None:
                    timed = await self.processes.warmup(batches + repeats)
                else:
                    timed = await self.batcher.run_in_worker(timed_warmup, self.adapter,
                                                             batches + repeats, self.clock)
                # per batch, in order, once per worker process; the estimates take one of each
                shapes = [(len(b), approx_tokens(b)) for b in batches + repeats]
                times = [t for i, t in enumerate(timed) if i % len(shapes) < len(batches)]
                self.batcher.seed_estimate(full_batch_seconds(times, self.policy.max_batch_size))
                self.batcher.seed_sizes(times)
                if self.adapter.info.kind == "text":
                    self.batcher.padding_cost = PaddingCost.from_warmup(
                        [(*shapes[i % len(shapes)], s) for i, (_, s) in enumerate(timed)])
                    self.batcher.padding_source = "warm-up fit, until served batches refit it"
                    log.info("batch padding rule: %s", self.batcher.padding_rule)
                advice = queue_bound_advice(
                    self.policy.max_queue, self.default_deadline_s(), self.policy.workers,
                    self.policy.max_batch_size,
                    full_batch_seconds(times, self.policy.max_batch_size, slowest=True))
                if advice is not None:
                    log.warning("%s", advice)
                await self._warm_shapes()
                if self.cascade is not None:
                    await self.batcher.run_in_worker(run_warmup, self.cascade.fast, batches_fast)
            except Exception as exc:  # noqa: BLE001 - report on /readyz instead of dying
                self.warmup_error = f"warm-up failed: {type(exc).__name__}; see the server log"
                log.exception("warm-up failed")
                log.error(self.warmup_error)
                return
        self.ready = True
        self.metrics.ready.set(1)

    async def _warm_shapes(self) -> None:
        """The batch sizes between 1 and the maximum, for a runtime that prepares each new
        shape on its first call (serve/warmup.py); untimed, so the estimates stay seeded from
        the batches of size 1 and max alone."""
        assert self.batcher is not None
        extra = shape_batches(self.adapter, self.policy.max_batch_size)
        if not extra:
            return
        started = self.clock()
        if self.processes is not None:
            done = await self.processes.warm_shapes(extra, SHAPE_WARMUP_BUDGET_S)
        else:
            done = await self.batcher.run_in_worker(warm_shapes, self.adapter, extra,
                                                    SHAPE_WARMUP_BUDGET_S)
        seconds = self.clock() - started
        if done < len(extra):
            log.warning("warm-up: %d of %d batch shapes run in the %g s budget; the first "
                        "batch at each of the other %d (the longest, largest) will answer late",
                        done, len(extra), SHAPE_WARMUP_BUDGET_S, len(extra) - done)
        else:
            log.info("warm-up: every batch size up to %d run at each length (%d more batches, "
                     "%.1f s): %s prepares each new shape on its first call",
                     self.policy.max_batch_size, done, seconds, self.adapter.info.runtime)

    async def stop(self) -> None:
        """Refuse new work, serve everything queued, wait for running batches."""
        if self.queue is not None:
            self.queue.close()
        for task in self._tasks:
            await asyncio.gather(task, return_exceptions=True)
        if self.processes is not None:
            await self.processes.close()
        if self.spinners is not None:
            self.spinners.stop()
        if self.cache is not None and self.cache.redis is not None:
            await self.cache.redis.close()

    def _params(self, tier: Tier) -> dict[str, Any]:
        """The request parameters that change an output, part of every cache key."""
        if self.cascade is None:
            return {}
        return {"tier": tier, "fast": [self.cascade.fast.info.id, self.cascade.fast.info.version],
                "threshold": self.cascade.threshold, "metric": self.cascade.metric}

    async def predict(self, request: PredictRequest, arrived: float) -> PredictResult:
        assert self.cache is not None and self.queue is not None
        inputs = request.inputs
        caching = self.policy.cache_size > 0 or self.cache.redis is not None
        keys = [cache_key(self.model["id"], self.model["version"], self._params(request.tier), x)
                for x in inputs]
        found = await self.cache.lookup(keys) if caching else [MISS] * len(inputs)
        result = PredictResult(outputs=[None if v is MISS else v for v in found],
                               cached=[v is not MISS for v in found])
        todo = [i for i, v in enumerate(found) if v is MISS]
        if not todo:
            return result
        computed = list(todo)
        if self.cascade is not None and self.cascade.uses_fast(request.tier):
            todo = await self._fast_pass(inputs, todo, request.tier, result)
        if todo:
            outcome = await self._full_pass(inputs, todo, request, arrived)
            for i, out in zip(todo, outcome.outputs, strict=True):
                result.outputs[i] = to_jsonable(out)
            _add(result.timings, outcome.timings)
        self.metrics.observe_stages(result.timings)
        if caching:
            await self.cache.store([(keys[i], result.outputs[i]) for i in computed])
        return result

    async def _fast_pass(self, inputs: list[Any], todo: list[int], tier: Tier,
                         result: PredictResult) -> list[int]:
        """Answer the confident inputs with the fast model; return the rest."""
        assert self.cascade is not None and self.batcher is not None
        outputs, timings = await self.batcher.run_in_worker(
            run_stages, self.cascade.fast, [inputs[i] for i in todo], self.clock)
        _add(result.timings, timings)
        outputs = [to_jsonable(o) for o in outputs]
        rest = []
        for i, out, ok in zip(todo, outputs, self.cascade.confident(outputs, tier), strict=True):
            if ok:
                result.outputs[i] = out
            else:
                rest.append(i)
        self.metrics.cascade_inputs.labels("fast").inc(len(todo) - len(rest))
        self.metrics.cascade_inputs.labels("escalated").inc(len(rest))
        return rest

    async def _full_pass(self, inputs: list[Any], todo: list[int], request: PredictRequest,
                         arrived: float) -> BatchOutcome:
        assert self.queue is not None and self.batcher is not None
        texts = [inputs[i] for i in todo]
        enqueued = self.clock()
        deadline = self._deadline(request, arrived, enqueued)
        item = WorkItem(
            inputs=texts, priority=request.priority, deadline=deadline,
            tokens=approx_tokens(texts) if self.adapter.info.kind == "text" else 0,
            enqueued_at=enqueued, future=asyncio.get_running_loop().create_future())
        self.queue.put(item)
        if deadline is None:
            outcome: BatchOutcome = await item.future
            return outcome
        # one batch time of grace: a batch that started in time may finish a little late on a
        # busy host, and its answer is worth more to the caller than a 503
        grace = max(ABANDON_GRACE_MIN_S, self.batcher.batch_estimate())
        try:
            outcome = await asyncio.wait_for(item.future, max(0.0, deadline - self.clock()) + grace)
            return outcome
        except TimeoutError:
            if self.queue.expire(item):  # still queued: its timer was late, not the model
                raise Rejected(ShedReason.DEADLINE, "shed before reaching the model: the "
                               "request's deadline passed in the queue; retry later or raise "
                               "timeout_ms", 503) from None
            # in the model: the call stalled or runs far slower than measured
            self.metrics.errors.labels(type="model_timeout").inc()
            raise Rejected(ShedReason.DEADLINE, "no answer by this request's deadline (the model "
                           "call stalled or ran slower than measured); answer abandoned; retry "
                           "later or raise timeout_ms", 503, retry_after_s=1.0) from None

    def _deadline(self, request: PredictRequest, arrived: float, enqueued: float) -> float | None:
        """A timeout the caller or the policy chose counts from arrival; the default overload
        bound counts from entering the queue, as it bounds queueing and service (a cache
        lookup stalled by a hung Redis must not use it up)."""
        timeout_ms = request.timeout_ms or self.policy.timeout_ms
        if timeout_ms:
            return arrived + timeout_ms / 1000
        bound = self.default_deadline_s()
        return None if bound is None else enqueued + bound


def _add(total: dict[str, float], part: dict[str, float]) -> None:
    for stage, seconds in part.items():
        total[stage] = total.get(stage, 0.0) + seconds
