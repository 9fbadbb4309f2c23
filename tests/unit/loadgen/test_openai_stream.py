"""The streaming (OpenAI-compatible) load test, piece by piece: SLO parsing, the token-level
summary of known records, the target against a scripted SSE server on 127.0.0.1 (timing,
usage / tokenizer / approximate token counts, failures), the sweep's search, and the CLI's
one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sse_server import Event, Script, ScriptedSSE, chat_tokens

from infertune.cli import main
from infertune.errors import ConfigError, DataError
from infertune.loadgen.llm_sweep import sweep
from infertune.loadgen.openai import (
    OpenAITarget,
    Prompt,
    load_prompts,
    run_stream,
    synthetic_prompts,
)
from infertune.loadgen.result import summarise
from infertune.loadgen.schedules import ScheduleSpec, ScheduleStats, build_schedule
from infertune.loadgen.streaming_result import (
    StreamingResult,
    StreamRecord,
    TokenSLO,
    parse_slos,
    summarise_streams,
)


def test_parse_slos() -> None:
    assert parse_slos("ttft_p95_ms=500, itl_p99_ms=50") == [
        TokenSLO("ttft", 95.0, 500.0), TokenSLO("itl", 99.0, 50.0)]
    assert parse_slos("e2e_p50_ms=2000")[0].key == "e2e_p50_ms"


@pytest.mark.parametrize("text, expected", [
    ("ttft=500", "is not understood; write NAME=MS such as ttft_p95_ms=500"),
    ("ttfb_p95_ms=500", "there is no metric 'ttfb'; use one of ttft, itl, tpot, e2e"),
    ("ttft_p97_ms=500", "percentile p97 is not offered"),
    ("itl_p95_ms=-1", "the limit must be > 0 ms"),
    ("itl_p95_ms=fast", "percentile and limit must be numbers"),
    (" , ", "--slo is empty"),
])
def test_bad_slos_are_one_line_errors(text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        parse_slos(text)


def _record(index: int, intended: float, tokens: list[float], count: int | None = None,
            status: str = "200") -> StreamRecord:
    return StreamRecord(index=index, intended_s=intended, sent_s=intended,
                        done_s=(tokens[-1] if tokens else intended) + 0.001, status=status,
                        token_s=tokens, output_tokens=len(tokens) if count is None else count,
                        token_source="usage")


def _summarise(records: list[StreamRecord], slos: list[TokenSLO],
               duration: float = 1.0) -> StreamingResult:
    stats = ScheduleStats(count=len(records), duration_s=duration,
                          mean_rate=len(records) / duration, peak_1s_rate=len(records),
                          gap_scv=0.0)
    load = summarise("t", [], stats)  # request-level figures are not under test here
    return summarise_streams("openai-chat", load, records, slos)


def test_token_level_summary_of_known_records() -> None:
    # request 0: first token 100 ms after its intended send, gaps 10 and 30 ms
    # request 1: first token 400 ms after, gaps 10 ms; request 2 failed
    records = [_record(0, 0.0, [0.1, 0.11, 0.14]), _record(1, 0.5, [0.9, 0.91]),
               _record(2, 0.6, [], status="503")]
    result = _summarise(records, parse_slos("ttft_p95_ms=300,itl_p95_ms=25"), duration=2.0)
    assert result.ttft is not None and result.ttft.count == 2
    assert result.ttft.p50 == pytest.approx(100.0) and result.ttft.max == pytest.approx(400.0)
    assert result.itl is not None and sorted(np.round([result.itl.min, result.itl.max], 6)) == \
        [10.0, 30.0]
    assert result.tpot is not None and result.tpot.max == pytest.approx(20.0)  # 40 ms / 2
    assert result.output_tokens is not None and result.output_tokens.total == 5
    assert result.output_tokens_per_s == pytest.approx(5 / 2.0)
    assert result.requests_per_s == pytest.approx(2 / 2.0)
    ttft, itl = result.slos
    assert (ttft.met, itl.met) == (False, False)  # p95 of {100, 400} is 400; of gaps 30
    # per request: 0 meets TTFT but its own p95 gap (29 ms) misses 25; 1 misses TTFT
    assert result.goodput_share == 0.0 and result.meets_slos is False
    relaxed = _summarise(records, parse_slos("ttft_p95_ms=500,itl_p95_ms=35"), duration=2.0)
    assert relaxed.meets_slos is True
    assert relaxed.goodput_rps == pytest.approx(1.0) and relaxed.goodput_share == \
        pytest.approx(2 / 3)
    assert StreamingResult.from_dict(json.loads(json.dumps(relaxed.to_dict()))).to_dict() == \
        relaxed.to_dict()


def _run(url: str, api: str = "openai-chat", n: int = 4, rate: float = 20.0,
         **kwargs: object) -> tuple[StreamingResult, OpenAITarget]:
    target = OpenAITarget(url, api, [Prompt((), 4)], model="m", **kwargs)  # type: ignore[arg-type]
    schedule = build_schedule(ScheduleSpec(shape="constant", rate=rate, duration_s=n / rate))
    return run_stream(schedule, target, slos=parse_slos("ttft_p95_ms=1000")), target


@pytest.mark.timeout(30)
def test_ttft_and_gaps_match_a_scripted_server() -> None:
    timing = {"ttft_ms": 1.0, "queue_ms": 0.5, "gaps_ms": [2.0, 3.0]}
    script = Script(events=chat_tokens(["a", "b", "c"], gap_s=0.04, first_s=0.12, usage=3,
                                       timing=timing))
    with ScriptedSSE(lambda n, body: script) as url:
        result, _ = _run(url)
    assert result.load.ok == result.load.sent == 4
    assert result.ttft is not None and result.itl is not None
    # first token 120 ms after the send; a scheduler on a busy machine may add a few ms
    assert 118.0 <= result.ttft.min and result.ttft.max < 200.0
    # a gap may look shorter than 40 ms when the token before it arrived late, but not on
    # average: each request's gaps add up to the 80 ms between its first and last token
    assert 39.0 <= result.itl.mean.value and result.itl.p50 < 80.0
    assert result.output_tokens is not None and result.output_tokens.source == "usage"
    assert result.output_tokens.total == 12 and not result.warnings
    assert result.prompt_tokens is not None and result.prompt_tokens.mean == 7  # from usage


@pytest.mark.timeout(30)
def test_request_body_and_token_count_sources() -> None:
    no_usage = Script(events=[Event(0.0, {"choices": [{"text": "x y"}]}),
                              Event(0.0, {"choices": [{"text": " z"}]})])
    with ScriptedSSE(lambda n, body: no_usage) as url:
        approx, _ = _run(url, api="openai-completions", n=2)
        counted, _ = _run(url, api="openai-completions", n=2,
                          count_tokens=lambda text: len(text.split()))
    assert approx.output_tokens is not None and approx.output_tokens.source == "approximate"
    assert approx.output_tokens.total == 4  # 2 events x 2 requests
    assert any("approximate" in w for w in approx.warnings)
    assert counted.output_tokens is not None and counted.output_tokens.source == "tokenizer"
    assert counted.output_tokens.total == 6  # "x y z" is 3 words, twice


@pytest.mark.timeout(30)
def test_the_request_is_an_openai_streaming_body() -> None:
    seen = ScriptedSSE(lambda n, body: Script(events=chat_tokens(["a"], 0, 0, usage=1)))
    with seen as url:
        target = OpenAITarget(url, "openai-chat", synthetic_prompts(5, 9, count=1))
        run_stream(build_schedule(ScheduleSpec(shape="constant", rate=10, duration_s=0.1)),
                   target)
    body = seen.bodies[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 9 and body["model"] == "default"  # no /v1/models there
    assert body["messages"][0]["role"] == "user"
    assert len(body["messages"][0]["content"].split()) == 5


@pytest.mark.timeout(30)
def test_failures_are_counted_not_raised() -> None:
    scripts = {0: Script(status=429), 1: Script(events=[Event(0, {"choices": []})]),
               2: Script(events=chat_tokens(["a", "b"], 0.0, 0.0)[:1], cut=True),
               3: Script(events=[Event(0, "not json"), *chat_tokens(["a"], 0, 0, usage=1)]),
               4: Script(events=chat_tokens(["a"], 0, 0, usage=1), done=False)}
    with ScriptedSSE(lambda n, body: scripts[n]) as url:
        result, _ = _run(url, n=5, rate=5)
    counts = result.load.status_counts
    assert counts["429"] == 1 and result.load.sheds == 1
    # cut mid-stream (2) and ended cleanly but without [DONE] (4)
    assert counts.get("stream_error", 0) == 2
    assert result.ttft is not None and result.ttft.count == 1  # only request 3 streamed a token
    assert any("without a single content token" in w for w in result.warnings)


def _fake_run(limit_rate: float):  # type: ignore[no-untyped-def]
    """run_at(rate) whose TTFT is `rate` ms: meets ttft_p95_ms=limit + 0.5 (a margin for float
    rounding) at rates <= limit."""
    def run_at(rate: float) -> StreamingResult:
        records = [_record(i, i * 0.01, [i * 0.01 + rate / 1000.0]) for i in range(20)]
        return _summarise(records, parse_slos(f"ttft_p95_ms={limit_rate + 0.5}"))
    return run_at


def test_sweep_doubles_then_bisects_to_the_highest_passing_rate() -> None:
    found = sweep(_fake_run(100), start_rate=10, max_steps=10)
    assert [p.rate for p in found.probes] == [10, 20, 40, 80, 160, 120, 100, 110]
    assert [p.passed for p in found.probes] == [True] * 4 + [False, False, True, False]
    assert found.best_rate == 100 and found.stopped == "bracketed within 10%"
    assert "ttft_p95_ms 110.0 > 100.5" in found.probes[-1].why
    low = sweep(_fake_run(3), start_rate=10, max_steps=3)
    assert [p.rate for p in low.probes] == [10, 5, 2.5] and low.best_rate == 2.5
    none = sweep(_fake_run(1), start_rate=10, max_steps=2)
    assert none.best_rate is None and "start lower" in none.notes[0]


def test_prompt_files(tmp_path: Path) -> None:
    good = tmp_path / "p.jsonl"
    good.write_text('{"messages": [{"role": "system", "content": "be brief"}, '
                    '{"role": "user", "content": "hi"}], "max_tokens": 5}\n\n'
                    '{"prompt": "once upon"}\n')
    first, second = load_prompts(good, default_max_tokens=32)
    assert first.max_tokens == 5 and first.text == "be brief\nhi"
    assert second.max_tokens == 32 and second.messages[0].content == "once upon"
    for line, expected in [("{", "not valid JSON"), ('{"messages": []}', "non-empty list"),
                           ('{"messages": [{"role": "robot", "content": "x"}]}', "role"),
                           ('{"prompt": "x", "max_tokens": 0}', "max_tokens must be")]:
        bad = tmp_path / "bad.jsonl"
        bad.write_text(line + "\n")
        with pytest.raises(DataError, match=expected):
            load_prompts(bad, 8)


@pytest.mark.parametrize("args, expected", [
    (["--api", "grpc"], "--api 'grpc' is not known"),
    (["--api", "openai-chat", "--sweep"], "--sweep needs --slo"),
    (["--slo", "ttft_p95_ms=500"], "--slo and --sweep need --api openai-chat"),
    (["--api", "openai-chat", "--slo", "ttfb_p95_ms=5"], "there is no metric 'ttfb'"),
    (["--api", "openai-chat", "--prompts", "/no/such.jsonl"], "prompt file /no/such.jsonl"),
    (["--api", "openai-chat", "--prompt-tokens", "0"], "must be >= 1"),
])
def test_cli_bad_streaming_input_is_one_line_exit_1(args: list[str], expected: str,
                                                    capsys: pytest.CaptureFixture) -> None:
    rc = main(["loadtest", "http://127.0.0.1:9/v1/chat/completions", "--duration", "1s", *args])
    err = capsys.readouterr().err
    assert rc == 1 and expected in err and err.count("\n") == 1, err


def test_cli_streaming_needs_a_url(capsys: pytest.CaptureFixture) -> None:
    assert main(["loadtest", "minilm", "--api", "openai-chat"]) == 1
    assert "streams from an http(s) URL" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_cli_counts_tokens_with_a_local_tokenizer(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    from transformers import BertTokenizerFast

    vocab = tmp_path / "tok" / "vocab.txt"
    vocab.parent.mkdir()
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world"]) + "\n")
    BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(str(vocab.parent))
    no_usage = Script(events=[Event(0.0, {"choices": [{"delta": {"content": "hello world"}}]}),
                              Event(0.0, {"choices": [{"delta": {"content": " hello"}}]})])
    out = tmp_path / "r.json"
    with ScriptedSSE(lambda n, body: no_usage) as url:
        rc = main(["loadtest", url, "--api", "openai-chat", "--shape", "constant", "--rate",
                   "10", "--duration", "0.2s", "--tokenizer", str(vocab.parent),
                   "--json", str(out)])
    assert rc == 0
    counts = json.loads(out.read_text())["result"]["output_tokens"]
    assert counts == {"total": 6, "mean": 3.0, "min": 3, "max": 3, "source": "tokenizer"}
    assert "(tokenizer)" in capsys.readouterr().out
    assert main(["loadtest", url, "--api", "openai-chat", "--tokenizer",
                 str(tmp_path / "none")]) == 1
    assert "is not a folder" in capsys.readouterr().err
