"""Model worker processes: each batch runs in a child process holding its own copy of the model.

Why: an eager PyTorch forward is hundreds of small operators, and the Python between them
holds the GIL. In one process, the serving event loop (HTTP parsing, queueing, JSON) and a
second worker thread take the GIL from the forward between operators, so every batch runs
slower the busier the server is. ``benchmarks/gil_contention.py`` measures it: on a 2-core
AVX2 EPYC with all-MiniLM-L6-v2 and one intra-op thread, a batch of 8 on a worker thread took
62-69 ms with the other thread idle, 77-81 ms with it busy 30 % of the time and 88-97 ms at
60 % (two runs). A child process has its own GIL, so the forward runs at its own speed and two
workers really run two batches at once. ONNX Runtime releases the GIL for a whole run, so its
variants keep the cheaper worker threads (``worker_kind: auto``).

Protocol over one duplex pipe per child, strictly request/answer:
  parent -> child  ("stages", inputs) | ("warmup", batches) | ("shapes", (batches, budget_s))
                   | ("stop", None)
  child -> parent  ("ready", model version) once loaded, then ("ok", result) | ("error", (type,
                   message)) per request
A child that dies fails the batch it held (BatchFailed "WorkerDied", a 500 for its callers) and
is started again; requests meanwhile wait for the other workers.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from infertune.libraries import quiet_libraries
from infertune.models import load
from infertune.serve.batcher import BatchFailed, run_stages
from infertune.serve.warmup import prime_on_this_thread, timed_warmup, warm_shapes

log = logging.getLogger("infertune.serve")
START_TIMEOUT_S = 600.0  # loading a large model from a slow disk; a hang still ends


@dataclass(frozen=True)
class ModelSource:
    """How a child process loads the same model the parent serves: the reference ``load``
    takes, the version the parent loaded (a child that finds another refuses to serve), and
    torch's intra-op threads for each child (None: leave the library default)."""

    ref: str
    version: str
    threads: int | None = None


@dataclass(eq=False)
class _Child:
    process: Any  # multiprocessing.Process (SpawnProcess)
    conn: Connection


class ModelProcesses:
    """``count`` child processes serving ``source``; ``run_stages`` and ``warmup`` run on
    whichever child is free. Start with ``start()`` on the serving loop, end with ``close()``."""

    def __init__(self, source: ModelSource, count: int) -> None:
        self.source = source
        self.count = count
        self._context = multiprocessing.get_context("spawn")  # fork would copy torch's threads
        self._idle: asyncio.Queue[_Child] = asyncio.Queue()
        self._children: list[_Child] = []
        self._closed = False
        # one blocking send/receive per child at a time, off the event loop (they release the GIL)
        self._io = ThreadPoolExecutor(count + 1, thread_name_prefix="model-io")

    async def start(self) -> None:
        """Start every child and wait until each has loaded the model and said ready."""
        for _ in range(self.count):
            self._children.append(self._spawn())
        await asyncio.gather(*(self._await_ready(c) for c in self._children))

    def _spawn(self) -> _Child:
        parent_end, child_end = self._context.Pipe(duplex=True)
        process = self._context.Process(target=child_main, args=(self.source, child_end),
                                        name="infertune-model", daemon=True)
        process.start()
        child_end.close()
        return _Child(process, parent_end)

    async def _await_ready(self, child: _Child) -> None:
        try:
            kind, payload = await asyncio.wait_for(self._receive(child), START_TIMEOUT_S)
        except (EOFError, OSError) as exc:  # it died before saying anything (import crash, OOM)
            child.process.join(timeout=5)
            raise RuntimeError(f"model worker process exited while starting (exit code "
                               f"{child.process.exitcode}); see the server log") from exc
        if kind != "ready":
            raise RuntimeError(f"model worker process failed to start: {payload[0]}: "
                               f"{payload[1]}")
        if payload != self.source.version:
            raise RuntimeError(f"model worker process loaded version {payload} of "
                               f"{self.source.ref}, the server {self.source.version}: the model "
                               "changed on disk while starting; restart the server")
        self._idle.put_nowait(child)

    async def run_stages(self, inputs: list[Any]) -> tuple[list[Any], dict[str, float]]:
        result: tuple[list[Any], dict[str, float]] = await self._call("stages", inputs)
        return result

    async def warmup(self, batches: list[list[Any]]) -> list[tuple[int, float]]:
        """Warm every child (each has its own allocator and kernels); all children's timed
        batches, run at once as they will be under load."""
        children = [await self._idle.get() for _ in range(len(self._children))]
        try:
            answers = await asyncio.gather(*(self._ask(c, "warmup", batches) for c in children))
        finally:
            for child in children:
                self._release(child)
        return [timing for times in answers for timing in times]

    async def warm_shapes(self, batches: list[list[Any]], budget_s: float) -> int:
        """``warmup.warm_shapes`` in every child at once; the fewest any child ran."""
        children = [await self._idle.get() for _ in range(len(self._children))]
        try:
            done: list[int] = await asyncio.gather(
                *(self._ask(c, "shapes", (batches, budget_s)) for c in children))
        finally:
            for child in children:
                self._release(child)
        return min(done)

    async def _call(self, kind: str, payload: Any) -> Any:
        child = await self._idle.get()
        try:
            return await self._ask(child, kind, payload)
        finally:
            self._release(child)

    async def _ask(self, child: _Child, kind: str, payload: Any) -> Any:
        try:
            await self._send(child, (kind, payload))
            status, answer = await self._receive(child)
        except (EOFError, OSError, BrokenPipeError) as exc:
            child.process.join(timeout=1)
            code = child.process.exitcode
            log.error("model worker process %s died (exit code %s, %r); starting another",
                      child.process.pid, code, exc)
            raise BatchFailed("WorkerDied", f"the model worker process died (exit code {code}) "
                              "while running this batch; it is being restarted: retry the "
                              "request", server_fault=True) from exc
        if status == "error":
            error_type, message = answer
            raise BatchFailed(error_type, message)
        return answer

    def _release(self, child: _Child) -> None:
        if self._closed:
            return
        if child.process.is_alive():
            self._idle.put_nowait(child)
            return
        child.conn.close()
        self._children.remove(child)
        replacement = self._spawn()
        self._children.append(replacement)
        task = asyncio.get_running_loop().create_task(self._await_ready(replacement))
        task.add_done_callback(_log_failure)

    async def _receive(self, child: _Child) -> tuple[str, Any]:
        """The child's next message, read on an I/O thread: the pipe stays blocking (an event
        loop's add_reader would make it non-blocking under uvloop, and a large answer would
        then arrive torn)."""
        message: tuple[str, Any] = await asyncio.get_running_loop().run_in_executor(
            self._io, child.conn.recv)
        return message

    async def _send(self, child: _Child, message: tuple[str, Any]) -> None:
        await asyncio.get_running_loop().run_in_executor(self._io, child.conn.send, message)

    async def close(self) -> None:
        """Ask every child to stop, then make sure it has."""
        self._closed = True
        for child in self._children:
            try:
                child.conn.send(("stop", None))
            except OSError:
                pass
        deadline = time.monotonic() + 10
        for child in self._children:
            while child.process.is_alive() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if child.process.is_alive():
                child.process.kill()
            child.process.join(timeout=5)
            child.conn.close()
        self._io.shutdown(wait=False)


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("a model worker process could not be restarted: %s", task.exception())


def child_main(source: ModelSource, conn: Connection) -> None:
    """The child process: load, prime, say ready, then answer requests until told to stop."""
    try:
        quiet_libraries()
        adapter = load(source.ref)
        if source.threads and adapter.info.runtime == "torch":
            import torch  # the torch extra: only torch models reach here

            torch.set_num_threads(source.threads)
        prime_on_this_thread(adapter)
    except Exception as exc:  # noqa: BLE001 - the parent reports it at start
        conn.send(("failed", (type(exc).__name__, str(exc)[:500])))
        return
    conn.send(("ready", adapter.info.version))
    while True:
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):
            return  # the parent has gone
        if kind == "stop":
            return
        try:
            if kind == "stages":
                result: Any = run_stages(adapter, payload, time.perf_counter)
            elif kind == "shapes":
                result = warm_shapes(adapter, *payload)
            else:
                result = timed_warmup(adapter, payload, time.perf_counter)
            conn.send(("ok", result))
        except Exception as exc:  # noqa: BLE001 - the batcher decides what the caller gets
            conn.send(("error", (type(exc).__name__, str(exc)[:500])))


def uses_processes(worker_kind: str, runtime: str, source: object | None) -> bool:
    """``auto``: processes for eager torch (its forward holds the GIL between operators),
    threads otherwise; processes need a source a child can load."""
    if source is None:
        return False
    return worker_kind == "process" or (worker_kind == "auto" and runtime == "torch")

