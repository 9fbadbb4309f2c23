"""Load generation and queueing simulation.

    schedules   seeded arrival schedules (constant, poisson, gamma, onoff, ramp, trace)
    runner      the open-loop runner: latency from the intended send time, client lag apart
    targets     HttpTarget (aiohttp); inprocess: InProcessTarget (an Adapter behind serve's runtime)
    result      RequestRecord, LoadResult (HDR histogram, CIs, timeline), summarise()
    server_sim  discrete-event model of a dynamic batcher: simulate(), sweep(), ServiceTime
"""

from infertune.loadgen.inprocess import InProcessTarget
from infertune.loadgen.result import LoadResult, RequestRecord, summarise
from infertune.loadgen.runner import RunOptions, run_load, run_schedule
from infertune.loadgen.schedules import (
    SHAPES,
    Schedule,
    ScheduleSpec,
    ScheduleStats,
    build_schedule,
    parse_duration,
)
from infertune.loadgen.server_sim import (
    EmpiricalServiceTime,
    LinearServiceTime,
    ServiceTime,
    SimResult,
    simulate,
    sweep,
)
from infertune.loadgen.targets import HttpTarget, Reply, Target, load_bodies

__all__ = [
    "SHAPES", "EmpiricalServiceTime", "HttpTarget", "InProcessTarget", "LinearServiceTime",
    "LoadResult", "Reply", "RequestRecord", "RunOptions", "Schedule",
    "ScheduleSpec", "ScheduleStats", "ServiceTime", "SimResult", "Target", "build_schedule",
    "load_bodies", "parse_duration", "run_load", "run_schedule", "simulate", "summarise", "sweep",
]
