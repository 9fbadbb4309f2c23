"""Cold start, measured in a fresh Python process (in-process numbers would be flattered by
modules and weights this process has already loaded): time to import infertune and the model's
runtime, to load the model, to the first inference, then a warm-up curve of single requests.

Settling rule: with ``steady`` = the median latency of the curve's second half, the model has
settled after ``i`` requests, where i is the first index at which the median of the window
latencies[i : i+5] is within 10% of steady (<= 1.10 x steady). Request 0 is the first
inference, so ``settled_after = 0`` means no warm-up was needed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from infertune.errors import InternalError
from infertune.serial import Serial

SETTLE_WINDOW = 5
SETTLE_TOLERANCE = 0.10

RUNTIME_MODULES = {"torch": ["torch", "transformers"], "onnxruntime": ["onnxruntime"],
                   "openvino": ["openvino"]}

_CHILD = r"""
import importlib, json, sys, time
ref, modules, n, cap = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), float(sys.argv[4])
t0 = time.perf_counter()
import infertune.models as models
for name in filter(None, modules):
    importlib.import_module(name)
t1 = time.perf_counter()
adapter = models.load(ref)
t2 = time.perf_counter()
raw = adapter.sample_inputs(1)
adapter.predict(raw)
t3 = time.perf_counter()
curve = [(t3 - t2) * 1000.0]
while len(curve) < n and time.perf_counter() - t3 < cap:
    s = time.perf_counter(); adapter.predict(raw); curve.append((time.perf_counter() - s) * 1000.0)
print("INFERTUNE_COLDSTART " + json.dumps({"import_s": t1 - t0, "load_s": t2 - t1,
      "first_inference_ms": (t3 - t2) * 1000.0, "curve_ms": curve}))
"""


@dataclass
class ColdStart(Serial):
    DERIVED = ("total_s",)

    import_s: float
    load_s: float
    first_inference_ms: float
    settled_after: int | None  # requests until latency settles (None: never within the curve)
    steady_ms: float
    curve_ms: list[float] = field(default_factory=list)
    rule: str = (f"settled at the first request i where median(latency[i:i+{SETTLE_WINDOW}]) "
                 f"<= {1 + SETTLE_TOLERANCE:.2f} x median of the curve's second half")

    @property
    def total_s(self) -> float:
        return self.import_s + self.load_s + self.first_inference_ms / 1000.0


def settle_index(curve_ms: Sequence[float], window: int = SETTLE_WINDOW,
                 tolerance: float = SETTLE_TOLERANCE) -> tuple[int | None, float]:
    """(requests until settled, steady latency) under the module's settling rule."""
    arr = np.asarray(curve_ms, dtype=np.float64)
    if arr.size == 0:
        raise ValueError("empty warm-up curve")
    steady = float(np.median(arr[arr.size // 2:]))
    for i in range(0, max(arr.size - window + 1, 1)):
        if float(np.median(arr[i:i + window])) <= (1 + tolerance) * steady:
            return i, steady
    return None, steady


def measure_cold_start(model_ref: str, runtime: str, *, requests: int = 30,
                       curve_seconds: float = 10.0, timeout_s: float = 180.0,
                       python: str = sys.executable) -> ColdStart:
    """Run the child script in a fresh interpreter and parse its one result line. The warm-up
    curve stops at ``requests`` or after ``curve_seconds``, whichever comes first."""
    modules = ",".join(RUNTIME_MODULES.get(runtime, []))
    try:
        done = subprocess.run([python, "-c", _CHILD, model_ref, modules, str(requests),
                               str(curve_seconds)],
                              capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise InternalError(f"cold-start child did not finish in {timeout_s:.0f} s") from exc
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("INFERTUNE_COLDSTART ")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise InternalError(f"cold-start child failed (exit {done.returncode}): {tail}")
    data = json.loads(lines[-1].split(" ", 1)[1])
    settled, steady = settle_index(data["curve_ms"])
    return ColdStart(import_s=data["import_s"], load_s=data["load_s"],
                     first_inference_ms=data["first_inference_ms"], settled_after=settled,
                     steady_ms=steady, curve_ms=list(data["curve_ms"]))
