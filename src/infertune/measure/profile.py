"""``profile(adapter, data, ...) -> Profile``: the baseline measurement every later stage reads
(schema "infertune.profile/v1", stored as runs/<name>/profile.json).

Order of work, and why: the cold start runs first, in a fresh process, while this process is
idle; then a warm-up; then timed single requests in ``rounds`` separate rounds (their p50s give
the run-to-run variance) under the utilisation sampler; then the service curve, the operator
profile and the padding analysis, which do not need the sampler.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infertune.errors import ConfigError, DataError, IncompatibleInputError, InfertuneError
from infertune.measure.coldstart import ColdStart, measure_cold_start
from infertune.measure.curve import (
    DEFAULT_BATCH_SIZES,
    ServiceCurve,
    measure_curve,
    seq_lens_from_lengths,
)
from infertune.measure.diagnosis import RoundStat, diagnose
from infertune.measure.hotspots import Hotspots, profile_ops
from infertune.measure.padding import PaddingWaste, padding_waste
from infertune.measure.stage_timers import StageReport, StageSamples, time_requests
from infertune.measure.utilisation import SampleFn, Utilisation, UtilisationSampler
from infertune.models.adapter import Adapter
from infertune.serial import Serial

SCHEMA = "infertune.profile/v1"
Progress = Callable[[str, int, int], None]  # (step, done, total)


@dataclass
class ProfileSettings(Serial):
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    requests: int = 1000  # single requests timed, split over ``rounds`` (10 in the top 1%)
    rounds: int = 4
    # Time caps keep the default run near two minutes on a busy 2-core machine; a round stops
    # at its share of ``stage_seconds`` once it has ``min_round_requests`` (the count is
    # reported, and the tail note says when it is too few for a stable p99).
    stage_seconds: float = 20.0
    min_round_requests: int = 10
    warmup: int = 10
    curve_repeats: int = 10
    curve_seconds: float = 25.0  # spread over the grid's points (<= 1 s each); see curve.py
    cold_start_seconds: float = 5.0  # cap on the fresh process's warm-up curve
    typical_batch: int = 8  # the batch size padding waste and hotspots are measured at
    hotspot_calls: int = 2
    hotspot_top: int = 10
    cold_start: bool = True
    cold_start_requests: int = 30
    seed: int = 0

    def __post_init__(self) -> None:
        self.batch_sizes = tuple(self.batch_sizes)
        if not self.batch_sizes or any(b < 1 for b in self.batch_sizes):
            raise ConfigError(f"batch sizes must be integers >= 1, got {list(self.batch_sizes)}; "
                              "pass e.g. --batch-sizes 1,8,32")
        if self.rounds < 1 or self.requests < self.rounds * 2:
            raise ConfigError(f"need requests >= 2 x rounds (got {self.requests} requests, "
                              f"{self.rounds} rounds); raise requests")
        for name in ("curve_repeats", "typical_batch", "hotspot_calls", "min_round_requests"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0:
            raise ConfigError(f"warmup must be >= 0, got {self.warmup}")

    @classmethod
    def quick(cls, **overrides: Any) -> ProfileSettings:
        """A short run (tens of seconds): fewer requests and repeats, tighter time caps. Its
        tail figures rest on few samples, and the tail notes say so."""
        fields: dict[str, Any] = dict(
            requests=100, rounds=2, stage_seconds=8.0, min_round_requests=20, warmup=3,
            curve_repeats=3, curve_seconds=8.0, hotspot_calls=1, cold_start_requests=10,
            cold_start_seconds=2.0)
        return cls(**{**fields, **overrides})


@dataclass
class Profile(Serial):
    model: dict[str, Any]  # ModelInfo.to_dict()
    data_source: str
    data_count: int
    settings: ProfileSettings
    stages: StageReport
    rounds: list[RoundStat]
    curve: ServiceCurve
    utilisation: Utilisation
    cold_start: ColdStart | None
    hotspots: Hotspots | None
    padding: PaddingWaste | None
    diagnosis: list[str]
    skipped: dict[str, str] = field(default_factory=dict)  # part -> why it was not measured
    step_seconds: dict[str, float] = field(default_factory=dict)  # wall time of each step
    hardware: dict[str, Any] | None = None
    seconds: float = 0.0
    schema: str = SCHEMA

    def __post_init__(self) -> None:
        if self.schema != SCHEMA:
            raise DataError(f"not a profile ({self.schema!r}, expected {SCHEMA!r}); "
                            "profile the model again with infertune profile")


def check_fits(adapter: Adapter, inputs: Sequence[Any], source: str) -> None:
    """Fail early, in one line, when the data does not fit the model's input."""
    try:
        adapter.preprocess(list(inputs[:2]))
    except IncompatibleInputError as exc:
        raise IncompatibleInputError(f"{source} does not fit {adapter.info.id}: {exc}") from exc


def profile(adapter: Adapter, data: Sequence[Any], batch_sizes: Sequence[int] | None = None,
            *, settings: ProfileSettings | None = None,
            model_ref: str | None = None, data_source: str = "", progress: Progress | None = None,
            hardware: dict[str, Any] | None = None, sample_fn: SampleFn | None = None) -> Profile:
    """Measure ``adapter`` on ``data`` (raw inputs). ``model_ref`` enables the cold start
    (it is loaded again in a fresh process); without it the cold start is skipped and says so.
    ``batch_sizes``, when given, overrides ``settings.batch_sizes`` for the service curve."""
    cfg = settings or ProfileSettings()
    if batch_sizes is not None:
        cfg = dataclasses.replace(cfg, batch_sizes=tuple(batch_sizes))
    if len(data) == 0:
        raise ConfigError("no data to profile with; pass --data with at least one example")
    check_fits(adapter, data, data_source or "the data")
    report = progress or (lambda step, done, total: None)
    started = time.perf_counter()
    skipped: dict[str, str] = {}

    steps: dict[str, float] = {}
    mark = [time.perf_counter()]

    def lap(name: str) -> None:
        now = time.perf_counter()
        steps[name] = now - mark[0]
        mark[0] = now

    cold = None
    if cfg.cold_start and model_ref:
        report("cold start (fresh process)", 0, 1)
        cold = measure_cold_start(model_ref, adapter.info.runtime,
                                  requests=cfg.cold_start_requests,
                                  curve_seconds=cfg.cold_start_seconds)
        report("cold start (fresh process)", 1, 1)
    else:
        skipped["cold_start"] = ("disabled" if not cfg.cold_start
                                 else "no model reference to reload in a fresh process")

    lap("cold_start")
    samples, rounds, util = _timed_rounds(adapter, data, cfg, report, sample_fn)
    stages = StageReport.from_samples(samples, rng_seed=cfg.seed)
    lap("stages")
    curve = _curve(adapter, data, cfg, report)
    lap("curve")
    batch = [data[i % len(data)] for i in range(cfg.typical_batch)]
    hotspots = _hotspots(adapter, batch, cfg, skipped, report)
    lap("hotspots")
    padding = _padding(adapter, data, cfg, skipped)
    lap("padding")
    if curve.unmeasured:
        skipped["curve_points"] = (f"{len(curve.unmeasured)} of the grid's points not measured "
                                   f"within the {cfg.curve_seconds:g} s curve budget")
    result = Profile(
        model=adapter.info.to_dict(), data_source=data_source, data_count=len(data),
        settings=cfg, stages=stages, rounds=rounds, curve=curve, utilisation=util,
        cold_start=cold, hotspots=hotspots, padding=padding, diagnosis=[], skipped=skipped,
        step_seconds=steps, hardware=hardware)
    result.diagnosis = diagnose(result.stages, result.rounds, result.utilisation,
                                result.cold_start, result.hotspots, result.padding)
    result.seconds = time.perf_counter() - started
    return result


def _timed_rounds(adapter: Adapter, data: Sequence[Any], cfg: ProfileSettings,
                  report: Progress, sample_fn: SampleFn | None,
                  ) -> tuple[StageSamples, list[RoundStat], Utilisation]:
    requests = [[data[i % len(data)]] for i in range(cfg.requests)]
    # warm-up: ``warmup`` requests, but stop after a quarter of the stage budget (at least one)
    warm_start = time.perf_counter()
    for i in range(cfg.warmup):
        adapter.predict(requests[i % len(requests)])
        if time.perf_counter() - warm_start >= cfg.stage_seconds / 4:
            break
    per_round = cfg.requests // cfg.rounds
    samples = StageSamples()
    rounds: list[RoundStat] = []
    step = "stage timing (single requests)"
    round_budget_s = cfg.stage_seconds / cfg.rounds
    with UtilisationSampler(sample_fn=sample_fn) as sampler:
        for r in range(cfg.rounds):
            chunk = requests[r * per_round:(r + 1) * per_round]
            done = len(samples)

            def on_request(i: int, d: int = done) -> None:
                report(step, d + i + 1, per_round * cfg.rounds)

            got = time_requests(adapter, chunk, on_request=on_request,
                                budget_s=round_budget_s, min_requests=cfg.min_round_requests)
            samples.extend(got)
            e2e = np.asarray(got.e2e)
            rounds.append(RoundStat(index=r, count=len(got), p50_ms=float(np.median(e2e)),
                                    p99_ms=float(np.percentile(e2e, 99))))
        util = sampler.stop()
    return samples, rounds, util


def _curve(adapter: Adapter, data: Sequence[Any], cfg: ProfileSettings,
           report: Progress) -> ServiceCurve:
    seq_lens = None
    if adapter.info.kind == "text" and hasattr(adapter, "token_lengths"):
        lengths = adapter.token_lengths(list(data))
        seq_lens = seq_lens_from_lengths(lengths, adapter.info.max_length)
    grid = len(cfg.batch_sizes) * (len(seq_lens) if seq_lens else 1)
    count = [0]

    def on_point(b: int, s: int | None) -> None:
        count[0] += 1
        report("service curve (forward by batch size)", count[0], grid)

    report("service curve (forward by batch size)", 0, grid)
    return measure_curve(adapter, data, batch_sizes=cfg.batch_sizes, seq_lens=seq_lens,
                         repeats=cfg.curve_repeats,
                         max_seconds_per_point=min(1.0, cfg.curve_seconds / grid),
                         budget_s=cfg.curve_seconds, on_point=on_point)


def _hotspots(adapter: Adapter, batch: list[Any], cfg: ProfileSettings, skipped: dict[str, str],
              report: Progress) -> Hotspots | None:
    report("operator hotspots", 0, 1)
    try:
        found = profile_ops(adapter, adapter.preprocess(batch), calls=cfg.hotspot_calls,
                            top=cfg.hotspot_top)
    except InfertuneError as exc:  # NotApplicableError: no profiler for this runtime
        skipped["hotspots"] = str(exc)
        found = None
    report("operator hotspots", 1, 1)
    return found


def _padding(adapter: Adapter, data: Sequence[Any], cfg: ProfileSettings,
             skipped: dict[str, str]) -> PaddingWaste | None:
    pre = getattr(adapter, "pre", None)
    if adapter.info.kind != "text" or pre is None or not hasattr(adapter, "token_lengths"):
        skipped["padding"] = "not a sequence model: inputs have fixed shapes"
        return None
    lengths = adapter.token_lengths(list(data))
    return padding_waste(lengths, cfg.typical_batch, max_length=pre.max_length,
                         padded_length=pre.padded_length, padding=pre.padding)
