"""Where the time likely goes, reasoned from the scenario's stated facts alone (advise).

Figures here are estimates derived from what the user stated, each saying how: Little's law for
the requests in flight, the stated percentile ratios, and Kingman's G/G/1 approximation for the
waiting time (Kingman 1961), E[Wq] ~ rho/(1-rho) * (ca^2 + cs^2)/2 * E[S].
"""

from __future__ import annotations

from infertune.config import Scenario
from infertune.report.knowledge import HardwareProfile
from infertune.report.schema import Diagnosis, DiagnosisItem, Figure

# Squared coefficient of variation of inter-arrival times assumed for each traffic pattern:
# Poisson arrivals have ca^2 = 1; bursts and spikes cluster arrivals. These are assumptions,
# stated in every figure that uses them.
ARRIVAL_SCV: dict[str, tuple[float, float]] = {
    "steady": (1.0, 1.0), "bursty": (2.0, 4.0), "spiky": (4.0, 10.0), "trace": (1.0, 10.0),
}
# Service-time variability from varying input lengths (assumed range of cs^2).
SERVICE_SCV = (0.25, 1.0)
KINGMAN_UTILISATION = 0.7
KINGMAN_REF = "Kingman's G/G/1 approximation (Kingman 1961)"
LONG_TOKENS = 4096  # tokens per request above which CPU tokenisation becomes visible


def kingman_wait_factor(rho: float, ca2: float, cs2: float) -> float:
    """E[Wq] / E[S] by Kingman's approximation; valid for 0 < rho < 1."""
    if not 0 < rho < 1:
        raise ValueError(f"utilisation must be in (0, 1), got {rho}")
    return rho / (1 - rho) * (ca2 + cs2) / 2


def diagnose(sc: Scenario, hw: HardwareProfile, pattern: str) -> Diagnosis:
    figures = _figures(sc, pattern)
    queue_dominant = _queueing_dominates(sc, pattern, figures)
    items = [
        _queueing_item(pattern, queue_dominant),
        _forward_item(sc, hw),
        _tokenisation_item(sc, hw),
        DiagnosisItem(stage="postprocessing and network", likelihood="unknown",
                      reason="not stated; log it per stage to rule it in or out"),
    ]
    if sc.deployment.target in ("serverless", "managed-endpoint"):
        items.append(DiagnosisItem(
            stage="cold starts", likelihood="significant",
            reason="scale-from-zero loads the model on the request path, which lands in p99"))
    queueing = (f"Queueing likely dominates p95 and p99 under {pattern} traffic, while compute "
                "(the forward pass) sets p50" if queue_dominant else
                "Compute likely dominates: it sets the floor of every request, and queueing "
                "matters mainly near the peak")
    p50_vs_p99 = _p50_vs_p99(sc)
    summary = f"{queueing}. {p50_vs_p99}".strip()
    return Diagnosis(summary=summary, items=items, figures=figures,
                     queueing_vs_compute=queueing, p50_vs_p99=p50_vs_p99)


def _figures(sc: Scenario, pattern: str) -> dict[str, Figure]:
    cur, tr = sc.current, sc.traffic
    out: dict[str, Figure] = {}
    rate = tr.mean_rps or cur.rps
    if rate and cur.p50_ms:
        in_flight = rate * cur.p50_ms / 1000
        out["requests_in_flight_at_mean"] = Figure(
            value=round(in_flight, 2), unit="requests in flight", source="estimate",
            basis="estimate by Little's law: mean rate x stated p50 (the median stands in for "
                  "the mean time in system)")
        if tr.peak_rps:
            out["requests_in_flight_at_peak"] = Figure(
                value=round(tr.peak_rps * cur.p50_ms / 1000, 2), unit="requests in flight",
                source="estimate",
                basis="estimate by Little's law at the stated peak rate, if latency held at p50")
    if tr.mean_rps and tr.peak_rps:
        out["peak_to_mean"] = Figure(value=round(tr.peak_rps / tr.mean_rps, 2), unit="x",
                                     source="estimate",
                                     basis="estimate: ratio of the stated peak and mean rates")
    if cur.p50_ms and cur.p99_ms:
        out["p99_over_p50"] = Figure(value=round(cur.p99_ms / cur.p50_ms, 2), unit="x",
                                     source="estimate",
                                     basis="estimate: ratio of the stated p99 and p50")
    ca_lo, ca_hi = ARRIVAL_SCV[pattern]
    rho = KINGMAN_UTILISATION
    out["kingman_wait_at_70pct"] = Figure(
        low=round(kingman_wait_factor(rho, ca_lo, SERVICE_SCV[0]), 2),
        high=round(kingman_wait_factor(rho, ca_hi, SERVICE_SCV[1]), 2),
        unit="x mean service time (mean queue wait)", source="estimate",
        basis=f"estimate from {KINGMAN_REF} at utilisation {rho}, with assumed arrival "
              f"variability ca^2 {ca_lo}-{ca_hi} for {pattern} traffic and service variability "
              f"cs^2 {SERVICE_SCV[0]}-{SERVICE_SCV[1]} from varying input lengths")
    return out


def _queueing_dominates(sc: Scenario, pattern: str, figures: dict[str, Figure]) -> bool:
    tail = figures.get("p99_over_p50")
    return pattern in ("bursty", "spiky") or (tail is not None and tail.mid >= 2.0)


def _queueing_item(pattern: str, dominant: bool) -> DiagnosisItem:
    if dominant:
        reason = (f"{pattern} arrivals pile up behind busy workers; by Kingman's approximation "
                  "the wait grows with arrival variability and as utilisation nears 1")
    else:
        reason = "steady arrivals wait little until utilisation nears 1"
    return DiagnosisItem(stage="queueing", likelihood="dominant" if dominant else "minor",
                         reason=reason)


def _forward_item(sc: Scenario, hw: HardwareProfile) -> DiagnosisItem:
    runtime = (sc.model.runtime or "").lower()
    notes = []
    typical = sc.inputs.typical
    if typical and typical.seq_len and typical.seq_len >= 256 and _is_transformer(sc):
        notes.append(f"attention cost grows with the square of the {typical.seq_len}-token inputs")
    if "fp32" in runtime and "fp16_tensor_cores" in hw.caps:
        notes.append(f"it runs in FP32 and leaves the {hw.gpu} tensor cores unused")
    elif "eager" in runtime:
        notes.append("eager execution without operator fusion")
    if sc.model.task == "generation":
        notes.append("token-by-token decoding repeats the forward pass per output token")
    reason = "; ".join(notes) or "the model's compute sets the time of every request"
    return DiagnosisItem(stage="forward pass", likelihood="dominant", reason=reason)


def _tokenisation_item(sc: Scenario, hw: HardwareProfile) -> DiagnosisItem:
    if not _is_transformer(sc):
        return DiagnosisItem(stage="preprocessing", likelihood="unknown",
                             reason="decoding and resizing inputs; log it to size it")
    typical = sc.inputs.typical
    tokens = (typical.batch_size or 1) * (typical.seq_len or 0) if typical else 0
    if tokens >= LONG_TOKENS:
        where = "on the CPU beside the GPU" if "gpu" in hw.caps else "on the same CPU cores"
        return DiagnosisItem(
            stage="tokenisation", likelihood="significant",
            reason=f"about {tokens} tokens per request are tokenised {where}")
    return DiagnosisItem(stage="tokenisation", likelihood="minor",
                         reason="short inputs tokenise quickly next to the forward pass")


def _p50_vs_p99(sc: Scenario) -> str:
    cur = sc.current
    if cur.p50_ms and cur.p99_ms:
        return (f"The median request takes {_n(cur.p50_ms)} ms and the slowest 1 % over "
                f"{_n(cur.p99_ms)} ms: the part above the median comes from waiting and from "
                "long inputs, not from the typical request's compute.")
    return ("p50 and p99 are not both stated, so the split between the median and the tail is "
            "unknown.")


def _is_transformer(sc: Scenario) -> bool:
    return (sc.model.family or "").startswith("transformer")


def _n(x: float) -> str:
    return f"{x:g}"
