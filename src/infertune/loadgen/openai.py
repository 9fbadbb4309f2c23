"""A streaming target for OpenAI-compatible LLM servers (vLLM, TGI, llama.cpp, gateways, and
the shipped ``infertune.loadgen.llmserver``): requests go out on the runner's open-loop
schedule, responses stream back as server-sent events, and the arrival time of every content
token is kept, so TTFT, inter-token gaps and TPOT are all measured from the intended send time
(see streaming_result.py).

    api "openai-chat"          POST .../v1/chat/completions with ``messages``; tokens in
                               ``choices[0].delta.content``
    api "openai-completions"   POST .../v1/completions with ``prompt``; tokens in
                               ``choices[0].text``

Both ask for ``stream_options.include_usage`` so the server's own token counts (``usage``) are
used when it sends them; else a tokenizer passed in counts the streamed text; else every
content event counts as one token and the count is labelled approximate.

The target reuses the generic open-loop runner (runner.run_schedule): ``send`` keeps the clock
reading at its start and, through http_stream's client, the reading of every network read with
its bytes; ``finish`` parses the events after the run and lines those readings up with the
runner's records (which hold the intended and actual send offsets), so the schedule, the
in-flight cap and client lag are exactly those of every other load test. Parsing after the run
keeps the client's work per token to a clock reading and a list append while sends are due.
A 2xx stream counts as answered only when it ended with ``data: [DONE]``, or, from a server
that sends no sentinel (``transformers serve``), when its body ended as its framing said after
an event naming a ``finish_reason``; one cut short or ended otherwise is a ``stream_error``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from infertune.errors import ConfigError, DataError
from infertune.jsonfile import read_jsonl
from infertune.loadgen.http_stream import RawResponse, StreamClient
from infertune.loadgen.precise_loop import precise_runner
from infertune.loadgen.result import (
    LoadResult,
    RequestRecord,
    is_ok,
    parse_server_timing,
    summarise,
)
from infertune.loadgen.runner import ProgressFn, RunOptions, run_schedule
from infertune.loadgen.schedules import Schedule
from infertune.loadgen.streaming_result import (
    StreamingResult,
    StreamRecord,
    TokenSLO,
    TokenSource,
    summarise_streams,
)
from infertune.loadgen.targets import Reply
from infertune.measure.collector import steady_gc

Api = Literal["openai-chat", "openai-completions"]
APIS: tuple[Api, ...] = ("openai-chat", "openai-completions")
ROLES = ("system", "user", "assistant", "tool", "developer")
TokenCounter = Callable[[str], int]
# Words of a synthetic prompt: common English words, each one token in GPT-2/Llama-style BPE
# vocabularies when preceded by a space, so N words make roughly N prompt tokens.
WORDS = ("the of and to in is was for on that with as by at from this be are or an it "
         "time model user data query answer fast slow report value system request").split()


@dataclass(frozen=True)
class Message:
    role: str
    content: str


@dataclass(frozen=True)
class Prompt:
    """One request's input: chat messages (a completions API sends their text joined)."""

    messages: tuple[Message, ...]
    max_tokens: int

    @property
    def text(self) -> str:
        return "\n".join(m.content for m in self.messages)


def synthetic_prompts(prompt_tokens: int, output_tokens: int, count: int = 64,
                      seed: int = 0) -> list[Prompt]:
    """``count`` distinct user prompts of ``prompt_tokens`` words each (about as many tokens),
    asking for ``output_tokens``. Each starts with its own number, so no two share a prefix
    that a prefix cache could reuse."""
    if prompt_tokens < 1 or output_tokens < 1:
        raise ConfigError("--prompt-tokens and --output-tokens must be >= 1")
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        words = rng.choice(WORDS, size=max(prompt_tokens - 1, 0)).tolist()
        out.append(Prompt((Message("user", " ".join([str(i), *words])),), output_tokens))
    return out


def load_prompts(path: str | Path, default_max_tokens: int) -> list[Prompt]:
    """Prompts from JSON Lines: ``{"messages": [{"role": ..., "content": ...}, ...]}`` or
    ``{"prompt": "..."}``, each with an optional ``max_tokens``."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"prompt file {path} not found; pass --prompts with a .jsonl file of "
                        '{"messages": [...]} lines')
    prompts = [_prompt(item, f"{path}: line {lineno}", default_max_tokens)
               for lineno, item in read_jsonl(path, fix="write one JSON object per line",
                                              error=DataError)]
    if not prompts:
        raise DataError(f"{path}: no prompts; write one JSON object per line")
    return prompts


def _prompt(item: Any, where: str, default_max_tokens: int) -> Prompt:
    if not isinstance(item, dict):
        raise DataError(f'{where}: expected an object with "messages" or "prompt"')
    max_tokens = item.get("max_tokens", default_max_tokens)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise DataError(f"{where}: max_tokens must be a whole number >= 1, got {max_tokens!r}")
    if isinstance(item.get("prompt"), str):
        return Prompt((Message("user", item["prompt"]),), max_tokens)
    raw = item.get("messages")
    if not isinstance(raw, list) or not raw:
        raise DataError(f'{where}: expected "messages": a non-empty list of '
                        '{"role": ..., "content": ...}, or "prompt": a string')
    messages = []
    for m in raw:
        if (not isinstance(m, dict) or m.get("role") not in ROLES
                or not isinstance(m.get("content"), str)):
            raise DataError(f"{where}: each message needs a role ({', '.join(ROLES)}) and a "
                            "string content")
        messages.append(Message(m["role"], m["content"]))
    return Prompt(tuple(messages), max_tokens)


@dataclass
class _Stream:
    started: float  # clock at the start of send(), lined up with the runner's sent offset
    tokens: list[float] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    usage_out: int | None = None
    usage_in: int | None = None
    usage_cached: int | None = None  # usage.prompt_tokens_details.cached_tokens (vLLM's)
    server_ms: dict[str, float] = field(default_factory=dict)
    server_gaps_ms: list[float] = field(default_factory=list)
    finished: bool = False  # an event named a finish_reason (the end, if no [DONE] follows)


class OpenAITarget:
    """POSTs streamed requests to an OpenAI-compatible route; never raises for a failed one."""

    shares_process = False

    def __init__(self, url: str, api: Api, prompts: list[Prompt], *, model: str | None = None,
                 timeout_s: float = 120.0, count_tokens: TokenCounter | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"target {url!r} is not an http(s) URL; write it like "
                              "http://127.0.0.1:8000/v1/chat/completions")
        if api not in APIS:
            raise ConfigError(f"--api {api!r} is not a streaming API; use one of "
                              f"{', '.join(APIS)}")
        if not prompts:
            raise ConfigError("no prompts; pass --prompts FILE or --prompt-tokens/--output-tokens")
        self.name, self.url, self.api = url, url, api
        self.prompts, self.model = prompts, model
        self.timeout_s, self.count_tokens, self.clock = timeout_s, count_tokens, clock
        StreamClient(url, timeout_s=timeout_s, clock=clock)  # a bad URL fails here, not later
        self._requests: list[bytes] = []
        self._responses: dict[int, RawResponse] = {}
        self._client: StreamClient | None = None

    async def open(self) -> None:
        self._responses = {}
        self._client = StreamClient(self.url, timeout_s=self.timeout_s, clock=self.clock)
        if self.model is None:
            self.model = await self._first_model(self._client)
        # Encode once: the load generator should not spend its time in json.dumps.
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        self._requests = [self._client.request_bytes("POST", json.dumps(self._body(p)).encode(),
                                                     headers=headers) for p in self.prompts]

    async def _first_model(self, client: StreamClient) -> str:
        """The first id the server lists at /v1/models; "default" when it lists none."""
        base = client.path.split("/v1/")[0] if "/v1/" in client.path else ""
        request = client.request_bytes("GET", path=f"{base}/v1/models")
        response = await client.send(request, self.clock())
        try:
            return str(json.loads(response.body)["data"][0]["id"])
        except (ValueError, KeyError, IndexError, TypeError):
            return "default"

    def _body(self, prompt: Prompt) -> dict[str, object]:
        body: dict[str, object] = {"model": self.model, "max_tokens": prompt.max_tokens,
                                   "stream": True, "stream_options": {"include_usage": True}}
        if self.api == "openai-chat":
            body["messages"] = [{"role": m.role, "content": m.content} for m in prompt.messages]
        else:
            body["prompt"] = prompt.text
        return body

    async def send(self, index: int) -> Reply:
        """Send one request and keep its raw answer; the status is provisional until
        ``finish`` has seen whether the stream ended with [DONE]."""
        assert self._client is not None, "open() the target first"
        response = await self._client.send(self._requests[index % len(self._requests)],
                                           self.clock())
        self._responses[index] = response
        if is_ok(response.status) and not response.complete:
            return Reply("stream_error")
        return Reply(response.status)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    def finish(self, records: list[RequestRecord]
               ) -> tuple[list[RequestRecord], list[StreamRecord]]:
        """Parse every kept answer (after the run: see the module docstring). Returns the
        runner's records with their final status and the server's Server-Timing header, and the
        StreamRecords with each token's arrival on the runner's time base."""
        settled, streams = [], []
        for r in records:
            response = self._responses.get(r.index)
            stream, done = self._parse(response) if response is not None else (None, False)
            status = "stream_error" if is_ok(r.status) and not done else r.status
            header = parse_server_timing(response.headers.get("server-timing")) \
                if response is not None else {}
            settled.append(replace(r, status=status,
                                   server_timing_ms={**r.server_timing_ms, **header}))
            streams.append(self._stream_record(settled[-1], stream))
        self._responses = {}  # the raw bytes are no longer needed
        return settled, streams

    def _parse(self, response: RawResponse) -> tuple[_Stream, bool]:
        """The events of one answer: (its stream, True when it ended with [DONE]). Each event
        takes the time of the read that brought its last byte, when the client could first
        have seen it."""
        key = "delta" if self.api == "openai-chat" else None
        stream = _Stream(started=response.started)
        pending = b""
        for now, chunk in zip(response.times, response.pieces, strict=True):
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                if self._event(line, now, stream, key):
                    return stream, True
        last = response.times[-1] if response.times else response.done
        ended = self._event(pending, last, stream, key)
        return stream, ended or (response.complete and stream.finished)

    def _stream_record(self, r: RequestRecord, s: _Stream | None) -> StreamRecord:
        shift = r.sent_s - s.started if s is not None else 0.0
        count, source = self._count(s) if s is not None else (0, "approximate")
        return StreamRecord(
            index=r.index, intended_s=r.intended_s, sent_s=r.sent_s, done_s=r.done_s,
            status=r.status, token_s=[t + shift for t in s.tokens] if s is not None else [],
            output_tokens=count, prompt_tokens=s.usage_in if s is not None else None,
            token_source=source, server_timing_ms={**r.server_timing_ms,
                                                   **(s.server_ms if s else {})},
            server_gaps_ms=list(s.server_gaps_ms) if s is not None else [],
            cached_tokens=s.usage_cached if s is not None else None)

    def _event(self, raw: bytes, now: float, stream: _Stream, key: str | None) -> bool:
        """Take one SSE line; True when it is the ``[DONE]`` sentinel."""
        line = raw.strip()
        if not line.startswith(b"data:"):
            return False  # comments, event names, blank separators
        payload = line[5:].strip()
        if payload == b"[DONE]":
            return True
        try:
            event = json.loads(payload)
        except ValueError:
            return False
        if not isinstance(event, dict):
            return False
        text = _content(event, key)
        if _finish_reason(event):
            stream.finished = True
        if text:
            stream.tokens.append(now)
            stream.pieces.append(text)
        usage = event.get("usage")
        if isinstance(usage, dict):
            stream.usage_out = _int(usage.get("completion_tokens"))
            stream.usage_in = _int(usage.get("prompt_tokens"))
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict):
                stream.usage_cached = _int(details.get("cached_tokens"))
        timing = event.get("infertune_timing")
        if isinstance(timing, dict):
            _read_server_timing(timing, stream)
        return False

    def _count(self, s: _Stream) -> tuple[int, TokenSource]:
        if s.usage_out is not None:
            return s.usage_out, "usage"
        if self.count_tokens is not None and s.pieces:
            return self.count_tokens("".join(s.pieces)), "tokenizer"
        return len(s.tokens), "approximate"


def _content(event: dict[str, Any], key: str | None) -> str:
    choices = event.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return ""
    holder = choices[0].get(key) if key else choices[0]
    if not isinstance(holder, dict):
        return ""
    text = holder.get("content" if key else "text")
    return text if isinstance(text, str) else ""


def _finish_reason(event: dict[str, Any]) -> bool:
    choices = event.get("choices")
    return (isinstance(choices, list) and bool(choices) and isinstance(choices[0], dict)
            and isinstance(choices[0].get("finish_reason"), str))


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _read_server_timing(timing: dict[str, Any], stream: _Stream) -> None:
    """A server's own per-request timings (the shipped llmserver sends them in its last
    event); kept beside the client's figures so the two can be compared."""
    for name, value in timing.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            stream.server_ms[name] = float(value)
    gaps = timing.get("gaps_ms")
    if isinstance(gaps, list):
        stream.server_gaps_ms = [float(g) for g in gaps if isinstance(g, (int, float))]


def run_stream(schedule: Schedule, target: OpenAITarget, options: RunOptions | None = None,
               slos: list[TokenSLO] | None = None, *,
               on_progress: ProgressFn | None = None) -> StreamingResult:
    """Run ``schedule`` against ``target`` open-loop and summarise it token by token."""
    options = options or RunOptions()
    load, records = run_stream_records(schedule, target, options, on_progress=on_progress)
    return summarise_streams(target.api, load, records, slos, seed=options.seed)


def run_stream_records(schedule: Schedule, target: OpenAITarget, options: RunOptions, *,
                       on_progress: ProgressFn | None = None
                       ) -> tuple[LoadResult, list[StreamRecord]]:
    """The request-level LoadResult and the per-request StreamRecords of one run, on the
    target's clock (its token times and the runner's offsets share one time base)."""
    with steady_gc():  # as in runner.run_load
        with precise_runner() as loop:  # timers to the microsecond: see precise_loop.py
            records = loop.run(run_schedule(schedule, target, options, clock=target.clock,
                                            on_progress=on_progress))
    records, streams = target.finish(records)
    load = summarise(target.name, records, schedule.stats(), lag_warn_ms=options.lag_warn_ms,
                     seed=options.seed)
    return load, streams
