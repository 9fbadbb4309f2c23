"""A measured report shaped like the one optimize writes (variants, policies, plots), for the
report tests (imported by tests/unit/report/conftest.py and tests/integration/test_report_html.py).
The 'measured' figures are fixture values for rendering tests, not measurements."""

from __future__ import annotations

from pathlib import Path

from infertune.config import load_scenario
from infertune.report.advisor import advise
from infertune.report.schema import (
    Figure,
    Percentiles,
    PlotData,
    PolicyRow,
    QualitySpeedPoint,
    Recommendation,
    Report,
    Series,
    StageGroup,
    StageTime,
    VariantRow,
)

REPO = Path(__file__).resolve().parents[3]
RERANKER = REPO / "examples" / "scenarios" / "reranker-t4.yaml"
HW = "2-core AMD EPYC (test fixture)"
# where optimize would have saved each kind of figure (report/figure_sources.py)
TIMED = "variants/ort-int8-pc/latency.json"
QUALITY = "variants/ort-int8-pc/quality.json"
SERVED = "serving.json"
PROFILED = "profile.json"


def _pcts(p50: float, p95: float, p99: float, n: int = 2000, art: str = TIMED) -> Percentiles:
    return Percentiles(p50=Figure.measured(p50, "ms", HW, n, artifact=art),
                       p95=Figure.measured(p95, "ms", HW, n, artifact=art),
                       p99=Figure.measured(p99, "ms", HW, n, artifact=art))


def _stage(ms: float) -> Figure:
    return Figure.measured(ms, "ms", HW, 500, artifact=PROFILED)


def _speed(times: float) -> Figure:
    return Figure.measured(times, "x", HW, 2000, artifact=TIMED)


def _quality(cosine: float) -> Figure:
    return Figure.measured(cosine, "mean cosine", HW, 600, artifact=QUALITY)


def _cdf(label: str, scale: float) -> Series:
    pts = [(scale * (1 + i / 10), i / 20) for i in range(21)]
    return Series(label=label, x_unit="ms", y_unit="fraction", points=pts, source="measured",
                  basis=f"measured on {HW} with 2000 samples", artifact=TIMED)


def build_measured_report() -> Report:
    """An advice report for the reranker, with the measured sections optimize would add."""
    report = advise(load_scenario(RERANKER))
    variants = [
        VariantRow(variant_id="baseline", title="torch eager fp32", latency=_pcts(13.4, 20.1, 25.0),
                   quality=_quality(1.0),
                   quality_metric="mean_cosine", quality_verdict="pass"),
        VariantRow(variant_id="ort-int8-pc", title="ORT INT8 per-channel",
                   latency=_pcts(2.6, 4.0, 5.5),
                   throughput=Figure.measured(380.0, "requests/s", HW, 2000, artifact=TIMED),
                   quality=_quality(0.992),
                   quality_metric="mean_cosine", quality_verdict="pass"),
    ]
    policies = [PolicyRow(policy_id="b8-w2", variant_id="ort-int8-pc",
                          settings={"max_batch_size": 8, "max_wait_ms": 2.0, "workers": 1},
                          at_mean=_pcts(3.0, 5.0, 7.0, art=SERVED),
                          at_peak=_pcts(4.0, 9.0, 14.0, art=SERVED),
                          goodput=Figure.measured(150.0, "requests/s", HW, 3000,
                                                  artifact=SERVED),
                          cost_per_1k=Figure.measured(0.0002, "USD", HW, 3000, artifact=SERVED),
                          meets_slo=True)]
    plots = PlotData(
        latency_cdf=[_cdf("baseline", 13.0), _cdf("ort-int8-pc", 2.5)],
        stage_breakdown=[StageGroup(label="baseline", stages=[
            StageTime(stage="tokenise", time=_stage(0.4)),
            StageTime(stage="forward", time=_stage(12.6)),
            StageTime(stage="postprocess", time=_stage(0.1))])],
        p99_vs_load=[Series(label="b8-w2", x_unit="requests/s", y_unit="ms",
                            points=[(20, 6.0), (60, 9.0), (120, 20.0)], source="measured",
                            basis=f"measured on {HW} with 3000 samples per point",
                            artifact=SERVED)],
        quality_vs_speed=[
            QualitySpeedPoint(label="baseline", speed=_speed(1.0),
                              quality=_quality(1.0), on_front=True),
            QualitySpeedPoint(label="ort-int8-pc", speed=_speed(5.0),
                              quality=_quality(0.992),
                              on_front=True),
            QualitySpeedPoint(label="torch-int8", speed=_speed(3.0),
                              quality=_quality(0.941))],
    )
    return report.model_copy(update={
        "kind": "run", "hardware": HW, "variants": variants, "policies": policies,
        "plots": plots, "recommendation": Recommendation(
            variant_id="ort-int8-pc", title="ORT INT8 per-channel",
            reason="fastest variant that meets the floor")})
