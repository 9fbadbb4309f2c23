"""The results files of ``infertune loadtest URL --api openai-* --json FILE``, as Artifacts
(artifacts/base.py): one open-loop run (``infertune.loadtest-stream/v1``) or a ``--sweep`` for
the highest rate meeting the SLOs (``infertune.loadtest-sweep/v1``).

    StreamRunFile(spec, result, requests, reuse).save(path)
    StreamSweepFile(spec, found).save(path)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infertune.artifacts.base import Artifact
from infertune.loadgen.llm_sweep import SweepResult
from infertune.loadgen.schedules import ScheduleSpec
from infertune.loadgen.streaming_result import StreamingResult
from infertune.loadgen.workloads import PrefixReuse


@dataclass
class StreamRunFile(Artifact):
    """One open-loop streaming run: the schedule, the summary, each request's figures
    (streaming_result.per_request) and what the prompts shared with earlier ones."""

    SCHEMA = "infertune.loadtest-stream"
    VERSION = 1

    spec: ScheduleSpec
    result: StreamingResult
    requests: list[dict[str, Any]]  # per_request's rounded figures, one object a request
    prefix_reuse: PrefixReuse


@dataclass
class StreamSweepFile(Artifact):
    """A rate sweep: the starting schedule and each probe up to the highest rate that met."""

    SCHEMA = "infertune.loadtest-sweep"
    VERSION = 1

    spec: ScheduleSpec
    sweep: SweepResult
