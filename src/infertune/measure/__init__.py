"""Measurement core: HDR histograms, latency summaries with bootstrap CIs, stage timers,
utilisation sampling, cold start, the service-time curve, operator hotspots, padding waste,
interleaved A/B comparison, and ``profile()`` which gathers them into a Profile.

Heavy pieces (torch.profiler, onnxruntime) are imported inside the functions that use them.
"""

from infertune.measure.compare import ComparisonResult, ComparisonStats, compare_samples
from infertune.measure.curve import ServiceCurve
from infertune.measure.histogram import LatencyHistogram
from infertune.measure.profile import Profile, ProfileSettings, profile
from infertune.measure.summary import Estimate, LatencySummary

__all__ = ["ComparisonResult", "ComparisonStats", "Estimate", "LatencyHistogram",
           "LatencySummary", "Profile", "ProfileSettings", "ServiceCurve", "compare_samples",
           "profile"]
