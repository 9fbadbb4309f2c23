"""Prompt mixes that exercise an LLM server's caches and scheduler, and the prefix reuse a run
actually sent.

    shared prefix    ``prefix_tokens`` words of one system prompt before a share
                     ``prefix_share`` of the prompts (the rest get a system prompt of their
                     own, of the same length: the same prompts without a shared prefix)
    multi-turn       sessions of ``turns`` turns; turn k resends the whole history (system,
                     every earlier user turn and an assistant reply of ``output_tokens``
                     words), so each turn's prompt starts with the previous one's
    lengths          user-turn lengths fixed, drawn from a distribution (``uniform:32,256``,
                     ``lognormal:128,0.5``: median and sigma) or resampled from the token
                     lengths of a file of the user's own prompts, counted with their tokenizer

Synthetic text is common English words, about one token each in BPE vocabularies (openai.py).
Prompts are listed in the order they are sent (the target uses them round-robin): turn k of a
session comes after turn k - 1 of every session, so a history is always on the server before
the turn that resends it.

``prefix_reuse`` counts what a schedule sends: for each request, the longest start of its
text (the messages as ``role: content`` lines, in characters) that an earlier request of the
run had already sent. It is what a prefix cache could reuse at most; what a server did reuse
it reports itself (usage.prompt_tokens_details.cached_tokens, read by openai.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from infertune.errors import ConfigError
from infertune.loadgen.openai import WORDS, Message, Prompt, TokenCounter, load_prompts

LengthKind = Literal["fixed", "uniform", "lognormal", "empirical"]


@dataclass(frozen=True)
class LengthDist:
    """How many words each user turn has."""

    kind: LengthKind
    values: tuple[float, ...]  # fixed: (n,); uniform: (low, high); lognormal: (median, sigma);
    # empirical: the observed lengths

    def draw(self, rng: np.random.Generator, count: int) -> list[int]:
        if self.kind == "fixed":
            out = np.full(count, self.values[0])
        elif self.kind == "uniform":
            out = rng.integers(int(self.values[0]), int(self.values[1]) + 1, size=count)
        elif self.kind == "lognormal":
            out = rng.lognormal(np.log(self.values[0]), self.values[1], size=count)
        else:
            out = rng.choice(np.asarray(self.values), size=count)
        return [max(1, round(float(v))) for v in out]


def parse_lengths(text: str) -> LengthDist:
    """``"128"``, ``"uniform:32,256"`` or ``"lognormal:128,0.5"``; a one-line error otherwise."""
    kind, _, rest = text.strip().partition(":")
    try:
        if not rest:
            return _checked(LengthDist("fixed", (float(int(kind)),)))
        values = tuple(float(v) for v in rest.split(","))
    except ValueError:
        raise ConfigError(f"--prompt-lengths {text!r} is not understood; write N, "
                          "uniform:LOW,HIGH or lognormal:MEDIAN,SIGMA") from None
    if kind not in ("uniform", "lognormal") or len(values) != 2:
        raise ConfigError(f"--prompt-lengths {text!r}: use uniform:LOW,HIGH or "
                          "lognormal:MEDIAN,SIGMA (two numbers)")
    return _checked(LengthDist(kind, values))  # type: ignore[arg-type]


def _checked(dist: LengthDist) -> LengthDist:
    v = dist.values
    bad = (v[0] < 1 if dist.kind in ("fixed", "lognormal") else False) or (
        dist.kind == "uniform" and not 1 <= v[0] <= v[1]) or (
        dist.kind == "lognormal" and v[1] < 0)
    if bad:
        raise ConfigError(f"prompt lengths {dist.kind}{list(v)}: lengths must be >= 1 "
                          "(uniform LOW <= HIGH, lognormal SIGMA >= 0)")
    return dist


def lengths_from_file(path: str | Path, count_tokens: TokenCounter) -> LengthDist:
    """The token lengths of the user's own prompts (load_prompts' JSONL), to resample."""
    lengths = [count_tokens(p.text) for p in load_prompts(path, 1)]
    return LengthDist("empirical", tuple(float(max(1, n)) for n in lengths))


@dataclass(frozen=True)
class WorkloadSpec:
    prompt_tokens: int = 128  # the user turn's words when ``lengths`` is None
    output_tokens: int = 64
    count: int = 64  # distinct prompts (multi-turn: sessions x turns, rounded down)
    prefix_tokens: int = 0
    prefix_share: float = 0.0
    turns: int = 1
    lengths: LengthDist | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1 or self.output_tokens < 1 or self.count < 1:
            raise ConfigError("--prompt-tokens, --output-tokens and the prompt count must "
                              "be >= 1")
        if self.prefix_tokens < 0:
            raise ConfigError(f"--prefix-tokens must be >= 0, got {self.prefix_tokens}")
        if not 0.0 <= self.prefix_share <= 1.0:
            raise ConfigError(f"--prefix-share is a share of the prompts, 0..1; got "
                              f"{self.prefix_share}")
        if self.prefix_share > 0 and self.prefix_tokens == 0:
            raise ConfigError("--prefix-share needs --prefix-tokens N (the shared prefix's "
                              "length)")
        if not 1 <= self.turns <= self.count:
            raise ConfigError(f"--turns must be between 1 and the prompt count ({self.count}),"
                              f" got {self.turns}")


def _words(rng: np.random.Generator, n: int) -> str:
    return " ".join(rng.choice(WORDS, size=n).tolist())


def build_prompts(spec: WorkloadSpec) -> list[Prompt]:
    """The prompt mix of ``spec``, in send order (see the module docstring)."""
    rng = np.random.default_rng(spec.seed)
    sessions = spec.count // spec.turns
    shared_count = round(spec.prefix_share * sessions)
    shared = _words(rng, spec.prefix_tokens) if spec.prefix_tokens else ""
    dist = spec.lengths or LengthDist("fixed", (float(spec.prompt_tokens),))
    user_lengths = dist.draw(rng, sessions * spec.turns)
    histories: list[list[Message]] = []
    for s in range(sessions):
        if not spec.prefix_tokens:
            histories.append([])
            continue
        # An own prefix starts with the session's number, so no two share even a first block.
        own = f"{s} {_words(rng, max(spec.prefix_tokens - 1, 1))}"
        histories.append([Message("system", shared if s < shared_count else own)])
    prompts: list[Prompt] = []
    for turn in range(spec.turns):
        for s in range(sessions):
            # the user turn also starts with its number: distinct even with no system prompt
            text = f"{s}.{turn} {_words(rng, max(user_lengths[s * spec.turns + turn] - 1, 1))}"
            histories[s].append(Message("user", text))
            prompts.append(Prompt(tuple(histories[s]), spec.output_tokens))
            histories[s].append(Message("assistant", _words(rng, spec.output_tokens)))
    # the shared-prefix sessions and the others alternate, so every stretch of a run mixes them
    return _interleave(prompts, sessions, shared_count) if 0 < shared_count < sessions else prompts


def _interleave(prompts: list[Prompt], sessions: int, shared_count: int) -> list[Prompt]:
    """Within each turn, spread the shared-prefix sessions evenly among the others."""
    order = sorted(range(sessions), key=lambda s: ((s + 0.5) / shared_count if s < shared_count
                                                   else (s - shared_count + 0.5)
                                                   / (sessions - shared_count)))
    out: list[Prompt] = []
    for turn in range(len(prompts) // sessions):
        block = prompts[turn * sessions:(turn + 1) * sessions]
        out.extend(block[s] for s in order)
    return out


class PrefixReuse(BaseModel):
    """What a run's requests shared with earlier requests of the same run, in characters of
    their messages' text (``role: content`` lines): the most a prefix cache could reuse."""

    model_config = ConfigDict(extra="forbid")
    requests: int
    prompt_chars: int
    reused_chars: int
    share: float  # reused_chars / prompt_chars
    requests_reusing: int  # requests that start with at least 64 characters sent before


def render(prompt: Prompt) -> str:
    return "".join(f"{m.role}: {m.content}\n" for m in prompt.messages)


def prefix_reuse(prompts: list[Prompt], sent: int) -> PrefixReuse:
    """The reuse of ``sent`` requests that take ``prompts`` round-robin (OpenAITarget's use)."""
    texts = [render(p) for p in prompts]
    first_pass = [_longest_seen(texts[:i], t) for i, t in enumerate(texts)]
    total = reused = reusing = 0
    for i in range(sent):
        k = i % len(texts)
        # a second pass resends a text already sent whole
        n = first_pass[k] if i < len(texts) else len(texts[k])
        total += len(texts[k])
        reused += n
        reusing += n >= 64
    return PrefixReuse(requests=sent, prompt_chars=total, reused_chars=reused,
                       share=reused / total if total else 0.0, requests_reusing=reusing)


def _longest_seen(earlier: list[str], text: str) -> int:
    return max((len(os.path.commonprefix([e, text])) for e in earlier), default=0)
