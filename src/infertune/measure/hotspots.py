"""Hotspots: the operators that take the forward pass's time.

torch runners: ``torch.profiler`` on CPU, ranked by self CPU time (self time, so a parent op
such as aten::linear does not double count its aten::addmm). ONNX Runtime runners: a second
session on the same model file with ``enable_profiling``, ranked by the summed duration of its
"Node" events per op type. A share is the op's time over the summed time of all ops recorded,
which is the forward time minus framework overhead outside any op.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infertune.errors import NotApplicableError
from infertune.models.adapter import Adapter, ModelInputs
from infertune.models.runners import OrtRunner
from infertune.serial import Serial


@dataclass
class Hotspot(Serial):
    op: str
    total_ms: float  # summed over all calls profiled
    count: int  # calls of this op over all forward passes profiled
    share_percent: float


@dataclass
class Hotspots(Serial):
    tool: str  # "torch.profiler" | "onnxruntime"
    forward_calls: int
    ops: list[Hotspot]  # sorted by time, largest first


def rank(totals_us: dict[str, float], counts: dict[str, int], top: int) -> list[Hotspot]:
    """Hotspots from op -> total microseconds and op -> count, top ``top`` by time."""
    grand = sum(totals_us.values())
    ordered = sorted(totals_us, key=lambda k: totals_us[k], reverse=True)[:top]
    return [Hotspot(op=k, total_ms=totals_us[k] / 1000.0, count=counts[k],
                    share_percent=100.0 * totals_us[k] / grand if grand > 0 else 0.0)
            for k in ordered]


def profile_ops(adapter: Adapter, feeds: ModelInputs, *, calls: int = 5,
                top: int = 10) -> Hotspots:
    runtime = adapter.runner.runtime
    if runtime == "torch":
        return torch_hotspots(adapter.forward, feeds, calls=calls, top=top)
    if runtime == "onnxruntime":
        return ort_hotspots(adapter.runner, feeds, calls=calls, top=top)
    raise NotApplicableError(f"no operator profiler for runtime {runtime!r}; "
                             "hotspots need a torch or onnxruntime runner")


def torch_hotspots(forward: Callable[[ModelInputs], Any], feeds: ModelInputs, *, calls: int,
                   top: int) -> Hotspots:
    # torch and onnxruntime are the torch and onnx extras: each imported on use
    from torch.profiler import ProfilerActivity, profile

    forward(feeds)  # warm: the first call's one-off allocations are not the model's hotspots
    prof = profile(activities=[ProfilerActivity.CPU])
    with _without_usdt_lines():
        prof.start()
    try:
        for _ in range(calls):
            forward(feeds)
    finally:
        with _without_usdt_lines():
            prof.stop()
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    for evt in prof.key_averages():
        if evt.self_cpu_time_total <= 0:
            continue
        totals[evt.key] = float(evt.self_cpu_time_total)
        counts[evt.key] = int(evt.count)
    return Hotspots(tool="torch.profiler", forward_calls=calls, ops=rank(totals, counts, top))


@contextlib.contextmanager
def _without_usdt_lines() -> Iterator[None]:
    """torch's Kineto writes "USDT: ... profiler_start/stop" trace lines to file descriptor 2
    (no setting turns them off). Hold fd 2 in a temp file around start/stop only, and pass on
    every other line, so a user's stderr keeps real warnings and loses the noise."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [line for line in held.read().splitlines(keepends=True)
                    if not line.startswith(b"USDT:")]
            if kept:
                os.write(2, b"".join(kept))


def ort_hotspots(runner: Any, feeds: ModelInputs, *, calls: int, top: int) -> Hotspots:
    """Profile on a fresh session from the runner's model file, with the same inputs."""
    import onnxruntime as ort

    session = runner.session
    # InferenceSession keeps the file it was built from only in this attribute (no public API)
    model_path = getattr(session, "_model_path", None)
    if not model_path or not Path(model_path).is_file():
        raise NotApplicableError("the ONNX session was built from bytes, not a file; "
                                 "hotspots need the model file path")
    with tempfile.TemporaryDirectory(prefix="infertune-ort-prof-") as tmp:
        options = ort.SessionOptions()
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tmp, "ort")
        prof_session = ort.InferenceSession(model_path, options,
                                            providers=session.get_providers())
        prof_runner = OrtRunner(prof_session)  # same dtype casting as the real runner
        prof_runner(feeds)  # warm
        for _ in range(calls):
            prof_runner(feeds)
        trace = Path(prof_session.end_profiling())
        events = json.loads(trace.read_text())
    totals, counts = ort_node_totals(events, skip_first_runs=1)
    return Hotspots(tool="onnxruntime", forward_calls=calls, ops=rank(totals, counts, top))


def ort_node_totals(events: list[dict[str, Any]],
                    skip_first_runs: int = 0) -> tuple[dict[str, float], dict[str, int]]:
    """Sum the duration (us) of "Node" kernel events by op type, skipping the warm-up run(s)."""
    runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    cutoff = -1  # node events that start at or before this timestamp belong to warm-up runs
    if 0 < skip_first_runs < len(runs):
        last_warm = runs[skip_first_runs - 1]
        cutoff = last_warm["ts"] + last_warm["dur"]
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    for e in events:
        if e.get("cat") != "Node" or not str(e.get("name", "")).endswith("_kernel_time"):
            continue
        if e.get("ts", 0) <= cutoff:
            continue
        op = e.get("args", {}).get("op_name", "?")
        totals[op] = totals.get(op, 0.0) + float(e.get("dur", 0))
        counts[op] = counts.get(op, 0) + 1
    return totals, counts
