"""The counters a server's /metrics shows, read back for the fault-table tests: the families
the README's fault table names (requests, errors, shed, cache), keyed by (sample name, labels),
and the change between two reads."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

FAMILIES = ("infertune_requests", "infertune_errors", "infertune_shed", "infertune_cache_hits",
            "infertune_cache_misses", "infertune_cache_errors")
Key = tuple[str, tuple[tuple[str, str], ...]]


def counters(url: str) -> dict[Key, float]:
    out: dict[Key, float] = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=5).text):
        if family.name not in FAMILIES:
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def change(before: dict[Key, float], after: dict[Key, float]) -> dict[str, float]:
    """Counters that moved, as 'name{label="value"}' -> increase."""
    moved: dict[str, float] = {}
    for key, value in after.items():
        diff = value - before.get(key, 0.0)
        if diff:
            name, labels = key
            inner = ",".join(f'{k}="{v}"' for k, v in labels)
            moved[f"{name}{{{inner}}}"] = diff
    return moved
