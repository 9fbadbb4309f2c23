"""Ask for the facts a scenario is missing (advise --interactive), and for a generation task
the token-level ones too (TTFT and ITL targets, prompt and output lengths). The question source
is an injected ``ask(prompt) -> str`` (typer.prompt on the command line, a list in tests). An
empty answer keeps the stated assumption; an invalid one is explained and asked again; hardware
the catalogue does not know is accepted with the assumption it leads to said back."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args

from infertune.config import Family, Framework, Pattern, Scenario, Target, Task
from infertune.errors import ConfigError
from infertune.report.generation import generation_gaps
from infertune.report.knowledge import HardwareCatalogue
from infertune.report.vague import NUMBER_FIELDS, read_number

Ask = Callable[[str], str]
Say = Callable[[str], None]
MAX_TRIES = 3
WHOLE_NUMBERS = ("batch_size", "seq_len", "prompt_tokens", "output_tokens")


@dataclass(frozen=True)
class Question:
    path: tuple[str, ...]
    text: str
    allowed: tuple[str, ...] = ()
    example: str = ""
    number: bool = False

    def prompt(self) -> str:
        allowed = f" [{'|'.join(self.allowed)}]" if self.allowed else ""
        example = f" (e.g. {self.example}; empty to skip)" if self.example else " (empty to skip)"
        return f"{self.text}{allowed}{example}"


QUESTIONS: dict[str, tuple[Question, ...]] = {
    "model": (
        Question(("model", "family"), "Model family", get_args(Family), "transformer-encoder"),
        Question(("model", "task"), "Task", get_args(Task), "classification"),
        Question(("model", "framework"), "Framework", get_args(Framework), "pytorch"),
    ),
    "deployment": (Question(("deployment", "target"), "Deployment target", get_args(Target),
                            "server"),),
    "current": (
        Question(("current", "p95_ms"), "Current p95 latency in ms", (), "480", number=True),
        Question(("current", "p99_ms"), "Current p99 latency in ms", (), "720", number=True),
        Question(("current", "rps"), "Current requests per second", (), "35", number=True),
    ),
    "hardware": (
        Question(("deployment", "hardware", "gpu"), "GPU name, or none", (), "T4"),
        Question(("deployment", "hardware", "cpu"), "CPU", (), "8 vCPU Intel Xeon Ice Lake"),
    ),
    "inputs": (
        Question(("inputs", "typical", "batch_size"), "Typical batch size", (), "1", number=True),
        Question(("inputs", "typical", "seq_len"), "Typical sequence length in tokens", (),
                 "128", number=True),
    ),
    "slo": (Question(("slo", "p95_ms"), "Target p95 latency in ms", (), "150", number=True),),
    "traffic": (
        Question(("traffic", "pattern"), "Traffic pattern",
                 tuple(p for p in get_args(Pattern) if p != "trace"), "bursty"),
        Question(("traffic", "mean_rps"), "Mean requests per second", (), "35", number=True),
        Question(("traffic", "peak_rps"), "Peak requests per second", (), "140", number=True),
    ),
    "constraints": (
        Question(("constraints", "cost_ceiling_usd_per_1k"),
                 "Cost ceiling in USD per 1,000 requests", (), "0.05", number=True),
    ),
}
# Generation only, keyed by GenerationGap.fact (report/generation.py).
GENERATION_QUESTIONS: dict[str, Question] = {
    "slo.ttft_p95_ms": Question(("slo", "ttft_p95_ms"), "Target time to first token p95 in ms",
                                (), "500", number=True),
    "slo.itl_p95_ms": Question(("slo", "itl_p95_ms"), "Target inter-token latency p95 in ms",
                               (), "50", number=True),
    "inputs.typical.output_tokens": Question(("inputs", "typical", "output_tokens"),
                                             "Typical output length in tokens", (), "256",
                                             number=True),
    "inputs.typical.prompt_tokens": Question(("inputs", "typical", "prompt_tokens"),
                                             "Typical prompt length in tokens", (), "1000",
                                             number=True),
}


def interview(scenario: Scenario, ask: Ask, say: Say,
              catalogue: HardwareCatalogue | None = None) -> Scenario:
    """Ask for each missing fact; returns the completed Scenario (the input is not changed)."""
    data = scenario.model_dump(mode="python", exclude_none=True)
    for fact in scenario.missing_facts():
        for question in QUESTIONS[fact]:
            data = _ask_one(question, data, ask, say, catalogue)
    for gap in generation_gaps(Scenario.from_dict(data, source="answers")):
        data = _ask_one(GENERATION_QUESTIONS[gap.fact], data, ask, say, catalogue)
    return Scenario.from_dict(data, source="answers")


def _ask_one(q: Question, data: dict[str, Any], ask: Ask, say: Say,
             catalogue: HardwareCatalogue | None) -> dict[str, Any]:
    for _ in range(MAX_TRIES):
        answer = ask(q.prompt()).strip()
        if not answer:
            return data
        value: Any = answer
        if q.number:  # "50ms", "about 50", "~20 req/s": read as scenario files are
            reading = read_number(answer, NUMBER_FIELDS.get(q.path, "count"))
            if reading is None:
                say(f"{answer!r} is not a number; e.g. {q.example}")
                continue
            value = reading.value
            if reading.how:
                say(f"read {answer!r} as {value:g} ({reading.how})")
        if q.number and value == int(value) and q.path[-1] in WHOLE_NUMBERS:
            value = int(value)
        trial = copy.deepcopy(data)
        _set(trial, q.path, value)
        try:
            scenario = Scenario.from_dict(trial, source="answer")
        except ConfigError as exc:
            say(str(exc))
            continue
        if q.path[-1] in ("gpu", "cpu"):
            hw = (catalogue or HardwareCatalogue.load()).resolve(scenario.deployment.hardware)
            for assumption in hw.assumptions:
                if repr(answer) in assumption:  # only what this answer led to
                    say(assumption)
        return trial
    say(f"skipped after {MAX_TRIES} tries; the stated assumption stays")
    return data


def _set(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
