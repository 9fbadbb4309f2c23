"""One always-valid verdict over two arms' Prometheus series, for the canary engines teams
already run (Argo Rollouts, Flagger step the traffic themselves and ask an analysis provider).

    arms        each arm is a label selector over the pods' series (Argo: the
                rollouts_pod_template_hash of the stable and the latest ReplicaSet; Flagger:
                app=<name> for the canary, app=<name>-primary for the primary); the counts are
                the pods' cumulative counters, summed by PromQL
    judge_once  the gates of gates.py on those counts, the latency thresholds from the stable
                arm's own histogram; the controller's looks and this call share
                ``judge_counts``, so the same counts give `infertune canary`'s verdict
    app         GET  /v1/analysis?label=L&canary=V&stable=W   the verdict as JSON (Argo's web
                                                              metric reads result.verdict)
                POST /v1/flagger/check     Flagger rollout webhook: 200 unless the gates fail
                POST /v1/flagger/promote   Flagger confirm-promotion webhook: 200 only once
                                           every gate passes (else Flagger keeps waiting)
                GET  /healthz

The always-valid intervals make polling at every analysis interval safe: the chance that any
look rolls back a canary no worse than the stable stays at or below alpha. ``judge_once`` has
no view of the steps: it compares everything each arm's pods have counted, so it holds only
while both arms answer traffic (Flagger analyses up to its maxWeight and then promotes; with
Argo, keep the analysis in the steps below setWeight 100). At full weight the stable's pods
count nothing new and the latency gates would compare different times, the fault
`infertune canary` avoids by stopping them at the 100% step's start (controller.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from infertune.errors import ConfigError
from infertune.rollout.gates import (
    METHOD,
    OWN_ANSWER,
    P95_ANCHOR,
    GateConfig,
    GateName,
    GateResult,
    Verdict,
    judge,
    overall,
)
from infertune.rollout.observe import (
    PROMQL,
    Sample,
    Snapshot,
    evidence,
    snapshot_from,
    threshold,
    threshold_near,
)

CANARY, STABLE = "canary", "stable"
# pods carry no shadow comparison and no feedback: the gates their series can feed
POD_GATES: tuple[GateName, ...] = ("errors", "latency_p95", "latency_p99")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_VALUE = re.compile(r"^[A-Za-z0-9._:/-]{1,253}$")


@dataclass(frozen=True)
class Arms:
    """The label that tells the arms apart and each arm's value of it."""

    label: str
    canary: str
    stable: str

    def __post_init__(self) -> None:
        if not _LABEL.match(self.label):
            raise ConfigError(f"label {self.label!r} is not a Prometheus label name; pass e.g. "
                              "rollouts_pod_template_hash")
        for value in (self.canary, self.stable):
            if not _VALUE.match(value):
                raise ConfigError(f"arm value {value!r} must be 1-253 of A-Z a-z 0-9 . _ : / "
                                  "-; pass the pod-template hash or app label value")
        if self.canary == self.stable:
            raise ConfigError(f"canary and stable are both {self.canary!r}; pass two arms")

    def selector(self, arm: str) -> str:
        return f'{self.label}="{self.canary if arm == CANARY else self.stable}"'


class ArmPrometheus:
    """The two arms' cumulative series by instant PromQL, labelled release=canary|stable."""

    def __init__(self, client: httpx.Client, arms: Arms) -> None:
        self.client, self.arms = client, arms

    def snapshot(self) -> Snapshot:
        samples: list[Sample] = []
        for arm in (CANARY, STABLE):
            for name, grouped in PROMQL.items():
                query = _arm_query(grouped, name, self.arms.selector(arm))
                for labels, value in self._query(query):
                    samples.append((name, {**labels, "release": arm}, value))
        return snapshot_from(samples)

    def _query(self, query: str) -> list[tuple[dict[str, str], float]]:
        try:
            response = self.client.get("/api/v1/query", params={"query": query})
            data = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise ConfigError(f"Prometheus query failed ({type(exc).__name__}); check "
                              "--prometheus URL") from exc
        if response.status_code != 200 or data.get("status") != "success":
            raise ConfigError(f"Prometheus answered {response.status_code} to {query!r}: "
                              f"{data.get('error', 'no error text')}")
        return [(dict(row["metric"]), float(row["value"][1])) for row in data["data"]["result"]]


def _arm_query(grouped: str, name: str, selector: str) -> str:
    """PROMQL's ``sum by (release, X) (name)`` as ``sum by (X) (name{selector})``."""
    by = grouped.split("sum by (", 1)[1].split(")", 1)[0]
    keep = [g.strip() for g in by.split(",") if g.strip() != "release"]
    group = f"sum by ({', '.join(keep)}) " if keep else "sum "
    return f"{group}({name}{{{selector}}})"


class Judgement(BaseModel):
    """The verdict and the evidence behind it (the web metric's JSON)."""

    model_config = ConfigDict(extra="forbid")

    verdict: Verdict
    method: str = METHOD
    alpha: float
    thresholds_s: dict[str, float | None]
    gates: list[dict[str, Any]]
    reason: str


def judge_counts(start: Snapshot, now: Snapshot, canary: str, stable: str, *,
                 p95_s: float | None, p99_s: float | None, config: GateConfig,
                 required: tuple[GateName, ...],
                 business_metric: str | None = None,
                 own_until: Snapshot | None = None) -> tuple[Verdict, list[GateResult]]:
    """One look: the gates on the counts since ``start`` (the controller's every poll). With
    ``own_until`` (the snapshot taken as a 100% step began) the latency and business gates,
    whose stable side is the stable's own answers, stand on the counts up to it
    (observe.evidence) and say so; errors and agreement go on to ``now``."""
    ev = evidence(start, now, canary, stable, p95_s=p95_s, p99_s=p99_s,
                  business_metric=business_metric, own_until=own_until)
    results = judge(ev, config)
    if own_until is not None:
        results = [replace(r, what=f"{r.what}, up to the 100% step") if r.gate in OWN_ANSWER
                   else r for r in results]
    return overall(results, required), results


def judge_once(now: Snapshot, canary: str, stable: str, config: GateConfig,
               baseline_samples: int = 100) -> Judgement:
    """The verdict over everything counted so far, thresholds from the stable's history."""
    counts = now.of(stable)
    p95 = threshold_near(counts, P95_ANCHOR, baseline_samples)
    p99 = threshold(counts, 0.99, baseline_samples)
    required = tuple(g for g in config.gates if g != "business")
    verdict, results = judge_counts(Snapshot(), now, canary, stable, p95_s=p95, p99_s=p99,
                                    config=config, required=required)
    pick = [r for r in results if r.verdict == verdict] or results
    reason = "; ".join(r.sentence() for r in pick)
    return Judgement(verdict=verdict, alpha=config.alpha, thresholds_s={"p95": p95, "p99": p99},
                     gates=[r.to_dict() for r in results], reason=reason)


class FlaggerHook(BaseModel):
    """Flagger's webhook payload; the arms come from the hook's ``metadata``."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    namespace: str = ""
    phase: str = ""
    metadata: dict[str, str] = Field(default_factory=dict)


SourceFactory = Callable[[Arms], Any]  # Arms -> MetricsSource


def analysis_app(source_for: SourceFactory, config: GateConfig,
                 baseline_samples: int = 100) -> Starlette:
    """The analysis endpoint; ``source_for(arms)`` gives the MetricsSource for two arms."""

    def verdict_for(arms: Arms) -> Judgement:
        return judge_once(source_for(arms).snapshot(), CANARY, STABLE, config,
                          baseline_samples)

    async def analysis(request: Request) -> JSONResponse:
        q = request.query_params
        try:
            arms = Arms(q.get("label", ""), q.get("canary", ""), q.get("stable", ""))
            judged = await run_in_threadpool(verdict_for, arms)  # PromQL blocks
            return JSONResponse(judged.model_dump(mode="json"))
        except ConfigError as exc:
            return JSONResponse({"error": str(exc)}, status_code=422)

    async def flagger(request: Request) -> JSONResponse:
        promote = request.url.path.endswith("/promote")
        try:
            hook = FlaggerHook.model_validate_json(await request.body())
            meta = hook.metadata
            arms = Arms(meta.get("label", "app"), meta.get("canary", hook.name),
                        meta.get("stable", f"{hook.name}-primary"))
            judged = await run_in_threadpool(verdict_for, arms)
        except ValidationError as exc:
            return JSONResponse({"error": f"flagger webhook body: {exc.errors()[0]['msg']}"},
                                status_code=422)
        except ConfigError as exc:
            return JSONResponse({"error": str(exc)}, status_code=422)
        ok = judged.verdict == "pass" if promote else judged.verdict != "fail"
        # non-2xx: a failed check (rollout hook) or a promotion held back (confirm hook)
        return JSONResponse(judged.model_dump(mode="json"), status_code=200 if ok else 409)

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "alive"})

    return Starlette(routes=[Route("/v1/analysis", analysis, methods=["GET"]),
                             Route("/v1/flagger/check", flagger, methods=["POST"]),
                             Route("/v1/flagger/promote", flagger, methods=["POST"]),
                             Route("/healthz", healthz, methods=["GET"])])


def pod_gates(alpha: float, max_disagreement: float) -> GateConfig:
    return GateConfig(alpha=alpha, gates=POD_GATES, max_disagreement=max_disagreement)

