"""A small OpenAI-compatible LLM server on 127.0.0.1 for tests and demos of streaming load
tests: a causal language model (Llama architecture, random weights, built locally from a config
by transformers; nothing is downloaded) generating token by token with its KV cache.

    python -m infertune.loadgen.llmserver --port 0      (prints the URL when ready)

Routes: POST /v1/chat/completions, POST /v1/completions (``stream`` true or false,
``stream_options.include_usage``), GET /v1/models, GET /health.

Scheduling: one engine thread holds up to ``max_num_seqs`` sequences and advances them one
decode step each in turn; a new sequence joins at the next step with its whole prompt as one
prefill (no chunked prefill). So TTFT grows with the queue and the prefills ahead of a request,
and inter-token latency with the number of sequences decoding: the two effects a streaming load
test separates.

Tokens: prompt text is read byte by byte (vocabulary of 256); generation is greedy and never
stops before ``max_tokens``, so output lengths are exactly what a test asks for.

Its own timings, measured in the handler from the request's arrival to each chunk's write, go
out in the last event as ``infertune_timing`` (ttft_ms, queue_ms, e2e_ms, gaps_ms), so a test can
compare the client's figures with the server's. ``--stall-ms`` holds every ``--stall-every``-th
request that long before its prefill (a stall before the first token); ``--synthetic-itl-ms``
replaces the model with a timer (calibrating the load generator without a model's CPU cost).
``--prefix-cache`` keeps the KV cache of recent prompts (prefix_cache.py): a prompt sharing whole
16-token blocks with a kept one prefills only the rest, so its TTFT drops by that part of the
prefill; ``usage.prompt_tokens_details.cached_tokens`` says how many tokens were reused, as
vLLM reports it.
``--fake`` starts fake_llmserver instead: the same routes with no model and no aiohttp, a few
microseconds per token, the load source of benchmarks/llm_loadgen_capacity.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import torch
from aiohttp import web
from transformers import LlamaConfig, LlamaForCausalLM

from infertune.loadgen import fake_llmserver
from infertune.loadgen.localserver import serve_forever
from infertune.loadgen.prefix_cache import PrefixCache

MODEL_ID = "infertune-tiny-llm"
VOCAB = 256
MAX_TOKENS_DEFAULT = 16


@dataclass(frozen=True)
class ServerConfig:
    hidden_size: int = 64
    layers: int = 2
    heads: int = 4
    max_positions: int = 1024
    seed: int = 0
    max_num_seqs: int = 8
    threads: int = 1
    stall_ms: float = 0.0
    stall_every: int = 1
    synthetic_itl_ms: float | None = None
    prefix_cache: bool = False

    def __post_init__(self) -> None:
        if self.hidden_size % self.heads:
            raise ValueError(f"--hidden-size {self.hidden_size} must be a multiple of --heads "
                             f"{self.heads}")
        if min(self.layers, self.heads, self.max_num_seqs, self.threads, self.stall_every) < 1:
            raise ValueError("--layers, --heads, --max-num-seqs, --threads and --stall-every "
                             "must be >= 1")
        if self.stall_ms < 0 or (self.synthetic_itl_ms is not None and self.synthetic_itl_ms < 0):
            raise ValueError("--stall-ms and --synthetic-itl-ms must be >= 0")


class RequestError(ValueError):
    """A bad request: answered 400 with the message, never a crash."""


@dataclass
class Job:
    prompt_ids: list[int]
    max_tokens: int
    loop: asyncio.AbstractEventLoop
    tokens: asyncio.Queue[int | BaseException | None]
    cache: object = None
    next_id: int = 0
    produced: int = 0
    prefill_at: float | None = None
    cancelled: bool = False
    cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache

    def emit(self, item: int | BaseException | None) -> None:
        self.loop.call_soon_threadsafe(self.tokens.put_nowait, item)


class Engine:
    """Advances every admitted sequence one token per turn, in one thread (see the docstring)."""

    def __init__(self, config: ServerConfig) -> None:
        torch.manual_seed(config.seed)
        torch.set_num_threads(config.threads)
        llama = LlamaConfig(vocab_size=VOCAB, hidden_size=config.hidden_size,
                            intermediate_size=config.hidden_size * 2,
                            num_hidden_layers=config.layers, num_attention_heads=config.heads,
                            num_key_value_heads=config.heads,
                            max_position_embeddings=config.max_positions)
        self.model = LlamaForCausalLM(llama)
        self.model.train(False)  # inference: no dropout
        self.config = config
        self.prefix_cache = PrefixCache() if config.prefix_cache else None
        self._incoming: queue.Queue[Job] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="llm-engine", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> None:
        self._incoming.put(job)

    def _run(self) -> None:
        active: list[Job] = []
        with torch.inference_mode():
            while True:
                if not active:
                    active.append(self._incoming.get())  # idle: block for work
                while len(active) < self.config.max_num_seqs and not self._incoming.empty():
                    active.append(self._incoming.get_nowait())
                for job in list(active):
                    if job.cancelled or self._step(job):
                        active.remove(job)

    def _prefill(self, job: Job) -> Any:  # a transformers output
        if self.prefix_cache is None:
            return self.model(input_ids=torch.tensor([job.prompt_ids]), use_cache=True)
        hit = self.prefix_cache.lookup(job.prompt_ids)
        job.cached_tokens = hit.reused
        out = self.model(input_ids=torch.tensor([job.prompt_ids[hit.reused:]]), cache=hit.cache,
                         use_cache=True)
        self.prefix_cache.keep(job.prompt_ids, out.cache)  # before decoding grows it
        return out

    def _step(self, job: Job) -> bool:
        """One prefill or decode step of ``job``; True when it is finished."""
        try:
            if job.cache is None:
                job.prefill_at = time.perf_counter()
                out = self._prefill(job)
            else:
                out = self.model(input_ids=torch.tensor([[job.next_id]]), cache=job.cache,
                                 use_cache=True)
        except Exception as exc:  # noqa: BLE001 - one failed sequence, not a dead engine
            job.emit(exc)
            return True
        job.cache = out.cache
        job.next_id = int(out.logits[0, -1].argmax())
        job.produced += 1
        job.emit(job.next_id)
        if job.produced >= job.max_tokens:
            job.emit(None)
            return True
        return False


def token_text(token: int) -> str:
    """A word-like piece per token id (two letters after a space, as BPE pieces often are)."""
    return " " + chr(97 + token % 26) + chr(97 + (token // 26) % 26)


def _parse(body: object, chat: bool, max_positions: int) -> tuple[list[int], int, bool, bool]:
    """(prompt ids, max_tokens, stream, include_usage) of a request body; RequestError if bad."""
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object")
    if chat:
        messages = body.get("messages")
        if (not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages)):
            raise RequestError("'messages' must be a non-empty list of {role, content} objects")
        text = "\n".join(f"{m.get('role', 'user')}: {m['content']}" for m in messages)
        text += "\nassistant:"
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt:
            raise RequestError("'prompt' must be a non-empty string")
        text = prompt
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens", MAX_TOKENS_DEFAULT))
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise RequestError(f"'max_tokens' must be an integer >= 1, got {max_tokens!r}")
    ids = list(text.encode("utf-8"))
    if len(ids) + max_tokens > max_positions:
        raise RequestError(f"prompt ({len(ids)} tokens) + max_tokens ({max_tokens}) exceeds "
                           f"the model's {max_positions} positions; shorten the prompt or "
                           "lower max_tokens")
    options = body.get("stream_options")
    usage = isinstance(options, dict) and options.get("include_usage") is True
    return ids, max_tokens, body.get("stream") is True, usage


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "invalid_request_error"
                                        if status == 400 else "server_error"}}, status=status)


@dataclass
class _Timing:
    arrival: float
    writes: list[float] = field(default_factory=list)

    def figures(self, queue_ms: float | None) -> dict[str, object]:
        """The ``infertune_timing`` figures of this answer, measured now (not a serialisation:
        e2e_ms is the time elapsed at the call)."""
        ttft = (self.writes[0] - self.arrival) * 1000.0 if self.writes else None
        return {"ttft_ms": ttft, "queue_ms": queue_ms,
                "e2e_ms": (time.perf_counter() - self.arrival) * 1000.0,
                "gaps_ms": [(b - a) * 1000.0 for a, b in zip(self.writes, self.writes[1:],
                                                             strict=False)]}


class App:
    """The aiohttp routes around one Engine (or the synthetic timer)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.engine = Engine(config) if config.synthetic_itl_ms is None else None
        self.count = 0

    def build(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        return app

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list",
                                  "data": [{"id": MODEL_ID, "object": "model"}]})

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, chat=False)

    async def _handle(self, request: web.Request, chat: bool) -> web.StreamResponse:
        timing = _Timing(arrival=time.perf_counter())
        self.count += 1
        number = self.count
        try:
            body = json.loads(await request.read())
            ids, max_tokens, stream, usage = _parse(body, chat, self.config.max_positions)
        except (ValueError, UnicodeDecodeError) as exc:
            return _error(400, str(exc) if isinstance(exc, RequestError)
                          else "the body is not valid JSON")
        job = Job(ids, max_tokens, asyncio.get_running_loop(), asyncio.Queue())
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        if stream:
            await response.prepare(request)
        if self.config.stall_ms and number % self.config.stall_every == 0:
            await asyncio.sleep(self.config.stall_ms / 1000.0)
        self._start(job)
        try:
            return await self._answer(request, response, job, timing, chat, stream, usage)
        except (ConnectionResetError, asyncio.CancelledError):
            job.cancelled = True  # the client went away; the engine drops the sequence
            raise

    def _start(self, job: Job) -> None:
        if self.engine is not None:
            self.engine.submit(job)
            return
        itl = (self.config.synthetic_itl_ms or 0.0) / 1000.0

        async def tick() -> None:
            job.prefill_at = time.perf_counter()
            for i in range(job.max_tokens):
                if i:
                    await asyncio.sleep(itl)
                job.produced += 1
                job.tokens.put_nowait(i % VOCAB)
            job.tokens.put_nowait(None)

        job.loop.create_task(tick())

    async def _answer(self, request: web.Request, response: web.StreamResponse, job: Job,
                      timing: _Timing, chat: bool, stream: bool,
                      usage: bool) -> web.StreamResponse:
        rid = f"cmpl-{uuid.uuid4().hex[:12]}"
        kind = "chat.completion" if chat else "text_completion"
        pieces: list[str] = []
        while (item := await job.tokens.get()) is not None:
            if isinstance(item, BaseException):
                if not stream:
                    return _error(500, f"generation failed: {item}")
                await _send(response, {"error": {"message": f"generation failed: {item}"}})
                await response.write(b"data: [DONE]\n\n")
                return response
            text = token_text(item)
            pieces.append(text)
            if stream:
                choice = {"index": 0, "delta": {"content": text}} if chat else \
                    {"index": 0, "text": text}
                # stamped before the write: write() hands the bytes to the socket at once, but
                # the await may resume late when the engine thread holds the GIL
                timing.writes.append(time.perf_counter())
                await _send(response, {"id": rid, "object": f"{kind}.chunk" if chat else kind,
                                       "model": MODEL_ID, "choices": [choice]})
        counts: dict[str, object] = {
            "prompt_tokens": len(job.prompt_ids), "completion_tokens": job.produced,
            "total_tokens": len(job.prompt_ids) + job.produced,
            "prompt_tokens_details": {"cached_tokens": job.cached_tokens}}
        queue_ms = ((job.prefill_at - timing.arrival) * 1000.0
                    if job.prefill_at is not None else None)
        if not stream:
            text = "".join(pieces)
            choice = ({"index": 0, "message": {"role": "assistant", "content": text},
                       "finish_reason": "length"} if chat
                      else {"index": 0, "text": text, "finish_reason": "length"})
            return web.json_response({"id": rid, "object": kind, "model": MODEL_ID,
                                      "choices": [choice], "usage": counts,
                                      "infertune_timing": timing.figures(queue_ms)})
        last: dict[str, object] = {"id": rid, "object": f"{kind}.chunk" if chat else kind,
                                   "model": MODEL_ID, "choices": [],
                                   "infertune_timing": timing.figures(queue_ms)}
        if usage:
            last["usage"] = counts
        await _send(response, last)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


async def _send(response: web.StreamResponse, event: dict[str, object]) -> None:
    await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--max-positions", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-num-seqs", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--stall-ms", type=float, default=0.0,
                        help="hold requests this long before their prefill")
    parser.add_argument("--stall-every", type=int, default=1, help="stall every N-th request")
    parser.add_argument("--synthetic-itl-ms", type=float, default=None,
                        help="no model: one token per this many ms (load-generator calibration)")
    parser.add_argument("--prefix-cache", action="store_true",
                        help="reuse the KV cache of prompts sharing whole 16-token blocks")
    parser.add_argument("--fake", action="store_true",
                        help="a load source for the client benchmark, not a model server: "
                             "fake_llmserver, one token per --synthetic-itl-ms (default 10)")
    args = parser.parse_args(argv)
    if args.fake:
        itl = 10.0 if args.synthetic_itl_ms is None else args.synthetic_itl_ms
        fake_llmserver.main(["--port", str(args.port), "--itl-ms", str(itl)])
        return
    try:
        config = ServerConfig(
            hidden_size=args.hidden_size, layers=args.layers, heads=args.heads,
            max_positions=args.max_positions, seed=args.seed, max_num_seqs=args.max_num_seqs,
            threads=args.threads, stall_ms=args.stall_ms, stall_every=args.stall_every,
            synthetic_itl_ms=args.synthetic_itl_ms, prefix_cache=args.prefix_cache)
    except ValueError as exc:
        parser.error(str(exc))

    asyncio.run(serve_forever(App(config).build(), args.port))


if __name__ == "__main__":
    main()
