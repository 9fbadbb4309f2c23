"""Typed, validated configuration: the scenario file (the eight facts of a latency review) and
the serving policy. Every model is a pydantic model built with ``extra="forbid"`` so a typo in a
hand-written YAML file is an error, not a silently ignored key.

``load_scenario(path)`` turns any validation failure into one ConfigError line naming the
field, the value and what is allowed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from infertune.errors import ConfigError

Family = Literal["transformer-encoder", "transformer-decoder", "cnn", "rnn", "tree", "other"]
Task = Literal[
    "classification", "embedding", "reranking", "generation", "detection", "regression", "other"
]
Framework = Literal["pytorch", "onnx", "tensorflow", "jax", "sklearn", "other"]
Target = Literal["server", "container", "edge", "managed-endpoint", "serverless"]
Pattern = Literal["steady", "bursty", "spiky", "trace"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class ModelFacts(_Strict):
    name: str | None = None
    family: Family | None = None
    task: Task | None = None
    framework: Framework | None = None
    parameters_millions: float | None = Field(default=None, gt=0)
    runtime: str | None = None


class HardwareFacts(_Strict):
    cpu: str | None = None
    gpu: str | None = None
    memory_gb: float | None = Field(default=None, gt=0)
    accelerator: str | None = None


class DeploymentFacts(_Strict):
    target: Target | None = None
    hardware: HardwareFacts = Field(default_factory=HardwareFacts)
    cost_per_hour_usd: float | None = Field(default=None, ge=0)


class CurrentLatency(_Strict):
    p50_ms: float | None = Field(default=None, ge=0)
    p95_ms: float | None = Field(default=None, ge=0)
    p99_ms: float | None = Field(default=None, ge=0)
    rps: float | None = Field(default=None, ge=0)
    # generation: time to first token and inter-token latency as measured today
    ttft_p95_ms: float | None = Field(default=None, ge=0)
    ttft_p99_ms: float | None = Field(default=None, ge=0)
    itl_p95_ms: float | None = Field(default=None, ge=0)
    itl_p99_ms: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> CurrentLatency:
        _check_ordered(self.p50_ms, self.p95_ms, self.p99_ms)
        _check_token_ordered(self.ttft_p95_ms, self.ttft_p99_ms, self.itl_p95_ms,
                             self.itl_p99_ms)
        return self


class InputShape(_Strict):
    batch_size: int | None = Field(default=None, ge=1)
    seq_len: int | None = Field(default=None, ge=1)
    shape: list[int] | None = None
    # generation: prompt tokens in and output tokens generated per request
    prompt_tokens: int | None = Field(default=None, ge=1)
    output_tokens: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _positive_shape(self) -> InputShape:
        if self.shape is not None and any(d < 1 for d in self.shape):
            raise ValueError(f"shape dimensions must be >= 1, got {self.shape}")
        return self


class InputFacts(_Strict):
    typical: InputShape | None = None
    worst: InputShape | None = None


class SLO(_Strict):
    p50_ms: float | None = Field(default=None, gt=0)
    p95_ms: float | None = Field(default=None, gt=0)
    p99_ms: float | None = Field(default=None, gt=0)
    # generation: time to first token (prefill) and inter-token latency (decode)
    ttft_p95_ms: float | None = Field(default=None, gt=0)
    ttft_p99_ms: float | None = Field(default=None, gt=0)
    itl_p95_ms: float | None = Field(default=None, gt=0)
    itl_p99_ms: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> SLO:
        _check_ordered(self.p50_ms, self.p95_ms, self.p99_ms)
        _check_token_ordered(self.ttft_p95_ms, self.ttft_p99_ms, self.itl_p95_ms,
                             self.itl_p99_ms)
        return self

    def targets(self) -> dict[str, float]:
        """The percentile targets that were set, e.g. {"p95": 150.0}."""
        pairs = {"p50": self.p50_ms, "p95": self.p95_ms, "p99": self.p99_ms}
        return {k: v for k, v in pairs.items() if v is not None}

    def token_targets(self) -> dict[str, float]:
        """The token-level targets that were set, e.g. {"ttft_p95": 500.0, "itl_p95": 50.0}."""
        pairs = {"ttft_p95": self.ttft_p95_ms, "ttft_p99": self.ttft_p99_ms,
                 "itl_p95": self.itl_p95_ms, "itl_p99": self.itl_p99_ms}
        return {k: v for k, v in pairs.items() if v is not None}


class TrafficFacts(_Strict):
    pattern: Pattern | None = None
    mean_rps: float | None = Field(default=None, gt=0)
    peak_rps: float | None = Field(default=None, gt=0)
    trace: Path | None = None

    @model_validator(mode="after")
    def _consistent(self) -> TrafficFacts:
        if self.mean_rps and self.peak_rps and self.peak_rps < self.mean_rps:
            raise ValueError(
                f"peak_rps ({self.peak_rps}) is below mean_rps ({self.mean_rps}); "
                "the peak must be at least the mean"
            )
        if self.pattern == "trace" and self.trace is None:
            raise ValueError("pattern 'trace' needs a trace file: set traffic.trace")
        return self


class QualityFloor(_Strict):
    """Either an absolute floor ``{metric, min}`` or an allowed drop ``{metric, max_drop}``
    from the baseline (in the metric's units, or as a fraction when ``relative``)."""

    metric: str
    min: float | None = None
    max_drop: float | None = Field(default=None, ge=0)
    relative: bool = False

    @model_validator(mode="after")
    def _one_kind(self) -> QualityFloor:
        if (self.min is None) == (self.max_drop is None):
            raise ValueError("set exactly one of 'min' or 'max_drop'")
        return self


class Constraints(_Strict):
    quality_floor: QualityFloor | None = None
    cost_ceiling_usd_per_1k: float | None = Field(default=None, ge=0)
    team_skills: list[str] | None = None
    rollout_window_days: float | None = Field(default=None, ge=0)


# The eight facts a latency review needs, and the question that each one answers.
FACTS: dict[str, str] = {
    "model": "model type and framework (decides which optimizations apply)",
    "deployment": "deployment target (server, edge, serverless... decides serving options)",
    "current": "current p50/p95/p99 and requests per second (the size of the gap)",
    "hardware": "hardware (decides INT8/BF16/FP16 and the compute budget)",
    "inputs": "typical and worst-case input shape and batch size (sets service time)",
    "slo": "the latency SLO (the target every option is judged against)",
    "traffic": "the traffic pattern (steady, bursty, spiky; decides queueing and batching)",
    "constraints": "constraints: quality floor, cost ceiling, team skills, rollout window",
}


class ServerTuning(_Strict):
    """``optimize --server-cmd`` from the scenario: the LLM server's command with ``{knob}``
    placeholders and ``{port}``, and the values to search; --server-cmd and --search on the
    command line win over it."""

    command: str = Field(min_length=1)
    search: dict[str, list[str | int | float]] = Field(default_factory=dict)
    ready_path: str = "/v1/models"
    ready_timeout_s: float = Field(default=300.0, gt=0)


class Scenario(_Strict):
    model: ModelFacts = Field(default_factory=ModelFacts)
    deployment: DeploymentFacts = Field(default_factory=DeploymentFacts)
    current: CurrentLatency = Field(default_factory=CurrentLatency)
    inputs: InputFacts = Field(default_factory=InputFacts)
    slo: SLO = Field(default_factory=SLO)
    traffic: TrafficFacts = Field(default_factory=TrafficFacts)
    constraints: Constraints = Field(default_factory=Constraints)
    server: ServerTuning | None = None  # what optimize --server-cmd tunes (not one of the facts)

    def missing_facts(self) -> list[str]:
        """Names (keys of FACTS) of the facts this scenario does not state."""
        hw = self.deployment.hardware
        present = {
            "model": self.model.family is not None or self.model.framework is not None,
            "deployment": self.deployment.target is not None,
            "current": any(
                v is not None for v in (self.current.p50_ms, self.current.p95_ms,
                                        self.current.p99_ms, self.current.ttft_p95_ms,
                                        self.current.itl_p95_ms)
            ),
            "hardware": any(v is not None for v in (hw.cpu, hw.gpu, hw.accelerator)),
            "inputs": self.inputs.typical is not None,
            "slo": bool(self.slo.targets()) or bool(self.slo.token_targets()),
            "traffic": self.traffic.pattern is not None or self.traffic.mean_rps is not None,
            "constraints": self.constraints.quality_floor is not None
            or self.constraints.cost_ceiling_usd_per_1k is not None,
        }
        return [name for name in FACTS if not present[name]]

    # pydantic's own dump and validate, named so Serial uses them (serial.py): the scenario is
    # written without its unset (None) facts, the file a user reads back, and a bad one is a
    # one-line ConfigError naming its source, not pydantic's multi-line ValidationError
    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "scenario") -> Scenario:
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(_one_line(exc, source)) from exc


# The per-request deadline a run states and `serve RUN` applies when none is given: ten times
# the loosest SLO target. The SLO is judged on the answers' percentiles; the deadline only
# protects callers from answers too late to use. At the target itself (before session 9) every
# request a burst delayed was refused, though an answer at 35 ms serves a caller with a 30 ms
# p99 target better than a 503 at 1 ms; ten times the target is where the confirmation as
# served already counts a request lost whatever comes later. Override with timeout_ms.
CLIENT_DEADLINE_FACTOR = 10.0


def client_deadline_ms(targets: dict[str, float]) -> float | None:
    """The default deadline for an SLO's ``targets`` ({"p99": ms}); None without targets."""
    return CLIENT_DEADLINE_FACTOR * max(targets.values()) if targets else None


def client_deadline_reason(targets: dict[str, float]) -> str:
    """The default deadline with its reason, for the report and the serve log."""
    deadline = client_deadline_ms(targets)
    if deadline is None:
        return "no SLO target: no default deadline beyond serve's overload bound"
    key = max(targets, key=lambda k: targets[k])
    return (f"default deadline timeout_ms={deadline:g} ({CLIENT_DEADLINE_FACTOR:g} x the "
            f"{key} target of {targets[key]:g} ms): it protects callers from answers too late "
            "to use, while the SLO is judged on the answers' percentiles; a request is refused "
            "only when the measured service times say it would miss this deadline; override "
            "with timeout_ms")


class ServePolicy(_Strict):
    """How a variant is served: the dynamic-batching and queueing knobs that optimize sweeps,
    plus the serving runtime's cache, safety and cascade settings (serve/ reads all of them).

    ``timeout_ms`` is the default per-request deadline when a request names none (None: the
    serving runtime's overload bound, max(50 ms, max_wait_ms + 3 full-batch service times) from
    entering the queue; see serve/runtime.py). ``api_key_env`` names the environment variable
    holding the API key, never the key itself, so a policy file can be committed."""

    max_batch_size: int = Field(default=8, ge=1, le=1024)
    max_wait_ms: float = Field(default=2.0, ge=0, le=10_000)
    workers: int = Field(default=1, ge=1, le=64)
    # Intra-op threads of a torch model in a server process; None = cores // workers, so that
    # the workers' thread pools do not oversubscribe the cores.
    model_threads: int | None = Field(default=None, ge=1, le=256)
    # Where batches run: worker threads of the server process, or child processes each holding
    # a copy of the model. auto = processes for eager torch, whose forward holds the GIL
    # between operators and so slows down under the event loop's work (serve/model_processes.py),
    # threads for ONNX Runtime, which releases the GIL for a whole run.
    worker_kind: Literal["auto", "thread", "process"] = "auto"
    # Spin an idle-class process on each core so no core halts between requests: on a virtual
    # machine a halted core wakes late (serve/keep_awake.py). Linux only; the cores show busy.
    keep_cores_awake: bool = False
    max_queue: int = Field(default=256, ge=1)
    timeout_ms: float | None = Field(default=None, gt=0)
    # layered cache: in-process LRU, then Redis when redis_url is set
    cache_size: int = Field(default=4096, ge=0)  # LRU entries; 0 turns the LRU off
    cache_ttl_s: float = Field(default=300.0, gt=0)
    redis_url: str | None = None
    redis_ttl_s: float = Field(default=3600.0, gt=0)
    redis_timeout_ms: float = Field(default=100.0, gt=0)
    # safety limits
    api_key_env: str | None = None
    max_request_bytes: int = Field(default=1_000_000, ge=1024)
    max_inputs: int = Field(default=64, ge=1)  # inputs per request
    max_input_chars: int = Field(default=100_000, ge=1)
    # a client trickling its body holds a connection, never the model: cut it off with 408
    body_timeout_s: float = Field(default=10.0, gt=0, le=600)
    on_long_input: Literal["truncate", "reject"] = "truncate"
    # warm-up and cascade
    warmup: bool = True
    cascade_threshold: float | None = Field(default=None, gt=0, le=1)
    cascade_metric: Literal["probability", "margin"] = "probability"


def load_scenario(path: str | Path,
                  prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> Scenario:
    """Read and validate a scenario YAML file; a relative trace path is resolved against the
    scenario file's folder and must exist. ``prepare`` rewrites the parsed mapping before it
    is validated (advise reads vague numbers with it: report/vague.py)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"scenario file {path} not found; pass the path of a YAML file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}; check the indentation") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of the eight facts")
    if prepare is not None:
        data = prepare(data)
    scenario = Scenario.from_dict(data, source=str(path))
    trace = scenario.traffic.trace
    if trace is not None:
        resolved = trace if trace.is_absolute() else path.parent / trace
        if not resolved.is_file():
            raise ConfigError(
                f"{path}: traffic.trace = {str(trace)!r}: file not found "
                "(paths are relative to the scenario file)"
            )
        scenario.traffic.trace = resolved
    return scenario


def _check_ordered(p50: float | None, p95: float | None, p99: float | None) -> None:
    pairs = (("p50_ms", p50), ("p95_ms", p95), ("p99_ms", p99))
    named = [(n, v) for n, v in pairs if v is not None]
    for (lo_name, lo), (hi_name, hi) in zip(named, named[1:], strict=False):
        if hi < lo:
            raise ValueError(
                f"{hi_name} ({hi}) is below {lo_name} ({lo}); percentiles must not decrease"
            )


def _check_token_ordered(ttft_p95: float | None, ttft_p99: float | None,
                         itl_p95: float | None, itl_p99: float | None) -> None:
    for name, p95, p99 in (("ttft", ttft_p95, ttft_p99), ("itl", itl_p95, itl_p99)):
        if p95 is not None and p99 is not None and p99 < p95:
            raise ValueError(f"{name}_p99_ms ({p99}) is below {name}_p95_ms ({p95}); "
                             "percentiles must not decrease")


def _one_line(exc: ValidationError, source: str) -> str:
    """The first validation problem as 'source: field = value: what is allowed'."""
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "(top level)"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        return (f"{source}: unknown field {field!r}; "
                "check the spelling against the documented fields")
    if err["type"] == "literal_error":
        allowed = err.get("ctx", {}).get("expected", "")
        return f"{source}: {field} = {err.get('input')!r} is not allowed; use one of {allowed}"
    if err["type"].startswith("missing"):
        return f"{source}: {field} is required"
    shown = err.get("input")
    if isinstance(shown, dict):
        return f"{source}: {field}: {msg}"
    return f"{source}: {field} = {shown!r}: {msg}"
