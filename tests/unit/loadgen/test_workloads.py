"""Prompt mixes for LLM servers (shared prefix, multi-turn, length distributions), the prefix
reuse a run sends, the usage field that reports a server's cache hits, and llmserver's prefix
cache matching by whole blocks (with a stand-in for the KV cache)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from sse_server import Event, Script, ScriptedSSE, chat_tokens

from infertune.cli import main
from infertune.errors import ConfigError, DataError
from infertune.loadgen.http_stream import RawResponse
from infertune.loadgen.openai import OpenAITarget
from infertune.loadgen.prefix_cache import PrefixCache, shared_blocks
from infertune.loadgen.result import RequestRecord
from infertune.loadgen.workloads import (
    LengthDist,
    WorkloadSpec,
    build_prompts,
    lengths_from_file,
    parse_lengths,
    prefix_reuse,
    render,
)


def test_a_shared_prefix_goes_before_the_given_share_of_prompts() -> None:
    prompts = build_prompts(WorkloadSpec(prompt_tokens=5, output_tokens=3, count=8,
                                         prefix_tokens=12, prefix_share=0.25))
    systems = [p.messages[0].content for p in prompts]
    assert [p.messages[0].role for p in prompts] == ["system"] * 8
    assert all(len(s.split()) == 12 for s in systems)
    shared = systems[0] if systems.count(systems[0]) == 2 else systems[1]
    assert systems.count(shared) == 2 and len(set(systems)) == 7  # 2 share it, 6 own ones
    # the two that share it are spread out, not sent back to back
    assert [i for i, s in enumerate(systems) if s == shared] == [1, 5]
    assert all(p.max_tokens == 3 and len(p.messages[1].content.split()) == 5 for p in prompts)


def test_without_a_shared_prefix_the_same_prompts_share_no_block() -> None:
    spec = WorkloadSpec(prompt_tokens=5, output_tokens=3, count=16, prefix_tokens=40)
    unshared = build_prompts(spec)
    reuse = prefix_reuse(unshared, 16)
    assert reuse.requests_reusing == 0 and reuse.share < 0.05
    shared = build_prompts(WorkloadSpec(prompt_tokens=5, output_tokens=3, count=16,
                                        prefix_tokens=40, prefix_share=1.0))
    # the same shape: 40 words of system prompt and 5 of user turn each
    assert {tuple(len(m.content.split()) for m in p.messages) for p in shared + unshared} == \
        {(40, 5)}
    assert prefix_reuse(shared, 16).requests_reusing == 15  # all but the first


def test_each_turn_resends_the_history_after_every_session_sent_the_turn_before() -> None:
    prompts = build_prompts(WorkloadSpec(prompt_tokens=20, output_tokens=3, count=6, turns=3))
    assert [len(p.messages) for p in prompts] == [1, 1, 3, 3, 5, 5]
    roles = [m.role for m in prompts[4].messages]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    for later, earlier in ((2, 0), (3, 1), (4, 2), (5, 3)):
        assert prompts[later].messages[:len(prompts[earlier].messages)] == \
            prompts[earlier].messages
    assert all(len(p.messages[-2].content.split()) == 3 for p in prompts[2:])
    reuse = prefix_reuse(prompts, 6)
    assert reuse.requests_reusing == 4
    # the exact reuse: every later turn resends the whole text of its session's turn before
    texts = [render(p) for p in prompts]
    assert reuse.reused_chars == sum(len(texts[k - 2]) for k in range(2, 6)) + \
        sum(len(_lcp(texts[k], texts[:k])) for k in range(2)) and reuse.requests == 6


def _lcp(text: str, earlier: list[str]) -> str:
    return max((os.path.commonprefix([e, text]) for e in earlier), key=len, default="")


def test_a_second_pass_over_the_prompts_counts_as_reused_whole() -> None:
    prompts = build_prompts(WorkloadSpec(prompt_tokens=6, output_tokens=2, count=4))
    once, twice = prefix_reuse(prompts, 4), prefix_reuse(prompts, 8)
    assert twice.prompt_chars == 2 * once.prompt_chars
    assert twice.reused_chars == once.reused_chars + once.prompt_chars


def test_lengths_from_a_distribution_or_the_users_prompts(tmp_path: Path) -> None:
    assert parse_lengths("32") == LengthDist("fixed", (32.0,))
    uniform = parse_lengths("uniform:10,20")
    spec = WorkloadSpec(output_tokens=2, count=200, lengths=uniform, seed=3)
    words = [len(p.messages[0].content.split()) for p in build_prompts(spec)]
    assert min(words) >= 10 and max(words) <= 20 and len(set(words)) == 11
    lognormal = parse_lengths("lognormal:64,0.5").draw(np.random.default_rng(0), 4000)
    assert np.median(lognormal) == pytest.approx(64, rel=0.05)
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": "w " * n}) for n in (3, 7, 7)) + "\n")
    mine = lengths_from_file(path, lambda text: len(text.split()))
    assert mine == LengthDist("empirical", (3.0, 7.0, 7.0))
    drawn = build_prompts(WorkloadSpec(output_tokens=2, count=50, lengths=mine))
    assert {len(p.messages[0].content.split()) for p in drawn} == {3, 7}


@pytest.mark.parametrize(("text", "message"), [
    ("uniform:5", "two numbers"), ("gauss:1,2", "two numbers"), ("x", "is not understood"),
    ("uniform:9,3", "LOW <= HIGH"), ("0", "must be >= 1"),
])
def test_bad_length_specs(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_lengths(text)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"prefix_share": 0.5}, "--prefix-share needs --prefix-tokens"),
    ({"prefix_tokens": 4, "prefix_share": 1.5}, "share of the prompts, 0..1"),
    ({"prefix_tokens": -1}, "--prefix-tokens must be >= 0"),
    ({"turns": 0}, "--turns must be between 1"),
    ({"count": 0}, "must be >= 1"),
])
def test_bad_workloads(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        WorkloadSpec(**kwargs)  # type: ignore[arg-type]


def test_a_missing_prompt_file_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found"):
        lengths_from_file(tmp_path / "none.jsonl", len)


def test_the_servers_cached_tokens_are_read_from_usage() -> None:
    target = OpenAITarget("http://127.0.0.1:1/v1/chat/completions", "openai-chat",
                          build_prompts(WorkloadSpec(prompt_tokens=2, output_tokens=1, count=1)))
    usage = {"usage": {"prompt_tokens": 40, "completion_tokens": 1,
                       "prompt_tokens_details": {"cached_tokens": 32}}, "choices": []}
    body = (b'data: {"choices": [{"index": 0, "delta": {"content": "x"}}]}\n\n'
            b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
    response = RawResponse(started=0.0, status="200", complete=True)
    response.add(0.5, body)
    target._responses = {0: response}
    _, streams = target.finish([RequestRecord(0, 0.0, 0.0, 0.6, "200")])
    assert streams[0].cached_tokens == 32 and streams[0].prompt_tokens == 40


class FakeKV:
    """Stands in for a transformers cache: its length, cropped by a negative count."""

    def __init__(self, n: int) -> None:
        self.n = n

    def get_seq_length(self) -> int:
        return self.n

    def crop(self, count: int) -> None:
        assert count <= 0, "transformers crops by a negative count"
        self.n += count


def test_the_prefix_cache_reuses_whole_blocks_and_always_prefills_the_last_token() -> None:
    assert shared_blocks((1, 2, 3, 4, 5), [1, 2, 3, 4, 9], 2) == 4
    assert shared_blocks((1, 2, 3, 4), [1, 2, 3, 4], 2) == 2  # the last token is prefilled
    assert shared_blocks((1, 2, 3), [7, 2, 3], 1) == 0
    cache = PrefixCache(block=16, max_entries=2)
    first = list(range(100))
    assert cache.lookup(first).reused == 0
    cache.keep(first, FakeKV(100))
    hit = cache.lookup([*range(40), 999, 998])
    assert hit.reused == 32 and hit.cache.get_seq_length() == 32
    again = cache.lookup(first)
    assert again.reused == 96  # 99 shared tokens (the last is prefilled), 6 whole blocks
    assert cache.lookup(first).cache is not cache.lookup(first).cache  # copies, never shared
    cache.keep(list(range(1000, 1100)), FakeKV(100))
    cache.keep(list(range(2000, 2100)), FakeKV(100))  # evicts the least recently used
    assert cache.lookup(first).reused == 0
    cache.keep(list(range(5)), FakeKV(5))  # shorter than a block: not kept
    assert cache.lookup(list(range(5)) + [1]).reused == 0


@pytest.mark.parametrize(("body", "complete", "status"), [
    (b'data: {"choices": [{"delta": {}, "finish_reason": "length"}]}\n\n', True, "200"),
    (b"", True, "stream_error"),  # framing ended, but no sign the answer was whole
    (b'data: {"choices": [{"delta": {}, "finish_reason": "length"}]}\n\n', False,
     "stream_error"),  # cut short
])
def test_a_stream_without_done_is_whole_only_when_it_finished_and_its_body_ended(
        body: bytes, complete: bool, status: str) -> None:
    """transformers serve ends its streams with a finish_reason and no [DONE] sentinel."""
    target = OpenAITarget("http://127.0.0.1:1/v1/chat/completions", "openai-chat",
                          build_prompts(WorkloadSpec(prompt_tokens=2, output_tokens=1, count=1)))
    response = RawResponse(started=0.0, status="200", complete=complete)
    response.add(0.5, b'data: {"choices": [{"delta": {"content": "x"}}]}\n\n' + body)
    target._responses = {0: response}
    settled, _ = target.finish([RequestRecord(0, 0.0, 0.0, 0.6, "200")])
    assert settled[0].status == status


@pytest.mark.timeout(60)
def test_loadtest_sends_a_shared_prefix_and_reports_the_reuse(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    usage = {"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 1,
                                      "prompt_tokens_details": {"cached_tokens": 30}}}
    script = Script(events=[*chat_tokens(["a"], 0.0, 0.0)[:1], Event(0.0, usage)])
    out = tmp_path / "out.json"
    server = ScriptedSSE(lambda n, body: script)
    with server as url:
        rc = main(["loadtest", url, "--api", "openai-chat", "--shape", "constant", "--rate",
                   "10", "--duration", "1s", "--prompt-tokens", "6", "--output-tokens", "1",
                   "--prefix-tokens", "30", "--prefix-share", "1", "--json", str(out)])
    assert rc == 0
    systems = {b["messages"][0]["content"] for b in server.bodies}
    assert len(server.bodies) == 10 and len(systems) == 1
    assert len(next(iter(systems)).split()) == 30
    reuse = json.loads(out.read_text())["prefix_reuse"]
    assert reuse["requests"] == 10 and reuse["requests_reusing"] == 9
    text = capsys.readouterr().out
    assert (f"prefix reuse sent: {reuse['share']:.0%} of the prompt characters had been sent "
            "before in this run (9 of 10 requests reused at least 64); the server took 75% of "
            "prompt tokens from its cache") in text.replace("\n", " ")
    assert main(["loadtest", url, "--api", "openai-chat", "--prompts", str(out),
                 "--prefix-tokens", "3"]) == 1
    assert "drop them with --prompts FILE" in capsys.readouterr().err
