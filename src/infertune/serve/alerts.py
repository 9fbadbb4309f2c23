"""Prometheus alert rules for `infertune serve`, generated from the scenario's SLO.

One generator for every place rules are written: `infertune serve --alerts-out FILE` writes
them as a Prometheus rule file, and `infertune export --to kubernetes` wraps the same groups
in a PrometheusRule. No threshold is a constant picked here:

    latency       each SLO percentile target (scenario.yaml slo.p50_ms / p95_ms / p99_ms)
    error, shed   the share of requests the strictest SLO percentile lets miss its target
                  (p99 -> 1%): a failed or shed request has missed it
    queue depth   with a measured capacity (goodput and service time of the run): the depth
                  at which a new request's expected wait uses up the serving deadline;
                  without one, half the policy's max_queue (said so in the rule)
    input drift   the population stability index of serve/live_drift.py over 0.25 (the usual
                  reading of PSI, a convention; serve/live_drift.ALERT_PSI)

Latency, error and shed rules are per release and per rollout stage: grouped by ``release``
(the label the router adds to every release's series; absent on a plain server) and
``instance``, with the release's ``role`` (stable, canary, shadow) joined from
``infertune_release_info`` where the router exports it, so a canary's tail pages as the
canary's, not as the service's.

    thresholds = AlertThresholds.derive(slo, policy, capacity)
    rule_groups(thresholds)   -> the rules as data (list of groups)
    rules_yaml(thresholds)    -> a rule file, every threshold's source in its annotations
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infertune.artifacts import RunDir
from infertune.config import SLO, ServePolicy, client_deadline_ms
from infertune.serve.live_drift import ALERT_PSI
from infertune.serve.prometheus_metrics import LATENCY_BUCKETS

QUANTILES = {"p50": 0.50, "p95": 0.95, "p99": 0.99}
WINDOW = "5m"  # rate() window: long enough for a few hundred requests at modest traffic
RuleGroups = list[dict[str, Any]]
SERVER_ERRORS = 'infertune_requests_total{status=~"5.."}'
BY = "release, instance"  # per release (the router's label) and per server


def per_stage(expr: str) -> str:
    """``expr`` (grouped by release and instance) with each release's rollout role joined
    from the router's infertune_release_info; a plain server (no router, no info) keeps
    ``expr`` as it is through ``or``."""
    return (f"(({expr}) * on ({BY}) group_left (role) max by ({BY}, role) "
            f"(infertune_release_info{{}}) or on ({BY}) ({expr}))")


@dataclass(frozen=True)
class Threshold:
    """A threshold and the sentence saying where its number came from."""

    value: float
    source: str


@dataclass(frozen=True)
class Capacity:
    """What one server measured: its goodput and its service time, with their origin."""

    goodput_rps: float
    service_ms: float
    source: str


@dataclass(frozen=True)
class AlertThresholds:
    latency_s: dict[str, Threshold]  # "p99" -> seconds; empty when the SLO sets no target
    error_ratio: Threshold
    queue_depth: Threshold

    @classmethod
    def derive(cls, slo: SLO, policy: ServePolicy,
               capacity: Capacity | None = None) -> AlertThresholds:
        targets = slo.targets()
        latency = {name: Threshold(ms / 1000.0, f"scenario.yaml slo.{name}_ms = {ms:g} ms")
                   for name, ms in targets.items()}
        return cls(latency_s=latency, error_ratio=_error_ratio(targets),
                   queue_depth=queue_depth_threshold(targets, policy, capacity))


def _error_ratio(targets: dict[str, float]) -> Threshold:
    if not targets:
        return Threshold(0.01, "no SLO percentile stated: 1% (the share a p99 target allows); "
                         "set slo.p99_ms in the scenario to derive it")
    strictest = max(targets, key=lambda name: QUANTILES[name])
    ratio = round(1.0 - QUANTILES[strictest], 4)
    return Threshold(ratio, f"1 - {QUANTILES[strictest]:g}: the share of requests the "
                     f"{strictest} SLO (scenario.yaml slo.{strictest}_ms) lets miss its target; "
                     "a failed or shed request misses it")


def queue_depth_threshold(targets: dict[str, float], policy: ServePolicy,
                          capacity: Capacity | None) -> Threshold:
    """Little's law on the measured capacity: a request that finds ``depth`` others waiting
    waits about depth / goodput seconds, so the deadline (serve's: the policy's timeout_ms,
    else config.client_deadline_ms) is used up at depth = goodput x (deadline - service time)."""
    deadline_ms = policy.timeout_ms or client_deadline_ms(targets)
    if capacity is not None and deadline_ms is not None:
        slack_s = max(0.0, (deadline_ms - capacity.service_ms) / 1000.0)
        depth = max(1, min(policy.max_queue, math.floor(capacity.goodput_rps * slack_s)))
        return Threshold(depth, f"floor({capacity.goodput_rps:g} req/s x ({deadline_ms:g} - "
                         f"{capacity.service_ms:g}) ms) capped at max_queue {policy.max_queue}: "
                         f"the depth whose expected wait uses up the {deadline_ms:g} ms "
                         f"deadline ({capacity.source})")
    half = max(1, policy.max_queue // 2)
    return Threshold(half, f"half of the policy's max_queue ({policy.max_queue}): no measured "
                     "capacity (goodput and service time of a run) to derive a depth from")


def latency_bracket(seconds: float) -> tuple[float, float] | None:
    """The histogram bucket bounds around ``seconds`` (None when it is a bound or outside)."""
    lower = [b for b in LATENCY_BUCKETS if b < seconds]
    upper = [b for b in LATENCY_BUCKETS if b > seconds]
    if seconds in LATENCY_BUCKETS or not lower or not upper:
        return None
    return lower[-1], upper[0]


def _latency_rule(name: str, threshold: Threshold) -> dict[str, Any]:
    q = QUANTILES[name]
    bracket = latency_bracket(threshold.value)
    # histogram_quantile interpolates linearly inside a bucket, so between two bounds the
    # estimate is only as sharp as the buckets; say which ones the target falls between
    precision = (f" (interpolated between the {bracket[0]:g} s and {bracket[1]:g} s buckets)"
                 if bracket else "")
    return {
        "alert": f"Infertune{name.upper()}OverSLO",
        "expr": per_stage(f"histogram_quantile({q:g}, sum by (le, {BY}) "
                          f"(rate(infertune_request_seconds_bucket[{WINDOW}])))")
                + f" > {threshold.value:g}",
        "for": "5m",
        "labels": {"severity": "page", "slo": name},
        "annotations": {
            "summary": f"{name} end-to-end latency {{{{ $value | humanizeDuration }}}} is over "
                       f"the {threshold.value * 1000:g} ms SLO",
            "description": "Check the queue share (infertune_queue_seconds) before the "
                           "model's (infertune_inference_seconds): queueing means add "
                           f"capacity, compute means optimize{precision}.",
            "threshold": f"{threshold.value:g} s from {threshold.source}",
        },
    }


def _ratio_expr(numerator: str) -> str:
    return per_stage(f"sum by ({BY}) (rate({numerator}[{WINDOW}])) / clamp_min(sum by ({BY}) "
                     f"(rate(infertune_requests_total[{WINDOW}])), 1e-9)")


def rule_groups(t: AlertThresholds) -> RuleGroups:
    """The alert rules as data: ``[{"name": ..., "rules": [...]}]``."""
    pct = f"{t.error_ratio.value * 100:g}%"
    rules: list[dict[str, Any]] = [_latency_rule(n, th) for n, th in t.latency_s.items()]
    rules += [
        {"alert": "InfertuneErrorRateSpike",
         "expr": f"{_ratio_expr(SERVER_ERRORS)} > {t.error_ratio.value:g}",
         "for": "5m", "labels": {"severity": "page"},
         "annotations": {"summary": f"over {pct} of predict requests fail with 5xx",
                         "description": "Errors by type are in infertune_errors_total; shed "
                                        "requests also answer 503 (infertune_shed_total).",
                         "threshold": f"{t.error_ratio.value:g} from {t.error_ratio.source}"}},
        {"alert": "InfertuneShedRateSpike",
         "expr": f"{_ratio_expr('infertune_shed_total')} > {t.error_ratio.value:g}",
         "for": "5m", "labels": {"severity": "page"},
         "annotations": {"summary": f"over {pct} of requests are shed (queue full or "
                                    "deadlines missed)",
                         "threshold": f"{t.error_ratio.value:g} from {t.error_ratio.source}"}},
        {"alert": "InfertuneQueueDepthHigh",
         "expr": f"max_over_time(infertune_queue_depth[{WINDOW}]) > {t.queue_depth.value:g}",
         "for": "10m", "labels": {"severity": "ticket"},
         "annotations": {"summary": f"queue depth stays above {t.queue_depth.value:g}",
                         "threshold": f"{t.queue_depth.value:g} from {t.queue_depth.source}"}},
        {"alert": "InfertuneModelErrors",
         "expr": "sum by (instance, type) (rate(infertune_errors_total"
                 f'{{type=~"batch_.*|internal_.*"}}[{WINDOW}])) > 0',
         "for": "2m", "labels": {"severity": "ticket"},
         "annotations": {"summary": "the model or the server raised {{ $labels.type }}"}},
        {"alert": "InfertuneRedisUnreachable",
         "expr": "sum by (instance) (rate(infertune_cache_errors_total"
                 f'{{layer="redis"}}[{WINDOW}])) > 0',
         "for": "10m", "labels": {"severity": "ticket"},
         "annotations": {"summary": "Redis cache errors: serving continues from the LRU and "
                                    "the model"}},
        {"alert": "InfertuneInputDrift",
         "expr": f"max by ({BY}, feature) (infertune_drift_psi{{}}) > {ALERT_PSI:g}",
         "for": "5m", "labels": {"severity": "ticket"},
         "annotations": {"summary": "{{ $labels.feature }} of the inputs or outputs has "
                                    "drifted from the release's first rows (PSI "
                                    "{{ $value }})",
                         "description": "Compare live inputs with the held-out set; "
                                        "re-validate the release's quality on the new mix.",
                         "threshold": f"{ALERT_PSI:g}: the usual reading of PSI (a "
                                      "convention, not derived here)"}},
        {"alert": "InfertuneNotReady", "expr": "infertune_ready == 0",
         "for": "10m", "labels": {"severity": "page"},
         "annotations": {"summary": "warm-up has not finished after 10 minutes (see /readyz "
                                    "for the reason)"}},
    ]
    return [{"name": "infertune-serve", "rules": rules}]


def rules_yaml(t: AlertThresholds) -> str:
    """A Prometheus rule file (``rule_files: [alerts.yaml]``)."""
    header = ["# Prometheus alerting rules for `infertune serve`, generated by",
              "# infertune.serve.alerts from the SLO; each rule's 'threshold' annotation says",
              "# where its number came from. Regenerate instead of editing by hand."]
    if not t.latency_s:
        header.append("# No latency rule: the scenario states no SLO percentile target.")
    body = str(yaml.safe_dump({"groups": rule_groups(t)}, sort_keys=False, width=1000))
    return "\n".join(header) + "\n" + body


def run_slo(ref: str | Path) -> SLO:
    """The SLO of a run folder (its scenario.yaml); an empty SLO for anything else."""
    run = RunDir(ref)
    return run.scenario().slo if run.paths.scenario.is_file() else SLO()


def write_rules(path: Path, t: AlertThresholds) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(rules_yaml(t), encoding="utf-8")
    return path
