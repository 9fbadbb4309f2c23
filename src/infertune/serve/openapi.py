"""The serving API's bodies as pydantic models, and the OpenAPI 3.1 document generated from them.

The request schemas come from the very classes that validate requests
(serve/request_validation.py), and the handlers build their answers with the response models
below, so the document cannot drift from the server. Security appears only when an API key is
configured, on exactly the routes the guard protects; without a key the admin routes are
documented as 403.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from infertune.serve.request_validation import PredictRequest, PurgeRequest

OPEN_PATHS = frozenset({"/healthz", "/readyz"})  # never need the key
ADMIN_PATHS = frozenset({"/v1/cache/purge"})  # always need the key (403 when none is set)
REF = "#/components/schemas/{model}"


class ErrorBody(BaseModel):
    error: str = Field(description="one line: the problem and the fix")


class ModelRef(BaseModel):
    id: str
    version: str


class PredictResponse(BaseModel):
    outputs: list[Any] = Field(description="one output per input, in order")
    model: ModelRef
    cached: list[bool] = Field(description="per input: answered from the cache")


class HealthBody(BaseModel):
    status: Literal["alive"]


class ReadyBody(BaseModel):
    status: Literal["ready"]
    model: ModelRef
    default_deadline_ms: float | None = Field(description=(
        "deadline of a request that names no timeout_ms (None until a service time is known)"))
    answer_bound_ms: float | None = Field(default=None, description=(
        "a 200 comes at most this long after the request entered the queue (the default "
        "deadline plus one batch time); later, 503"))
    warnings: list[str] = Field(description="e.g. serving on a public address without a key")


class ConfigBody(BaseModel):
    """What /v1/config shows: the configuration this server runs with, as ``infertune serve``
    resolved it (a run's report.json < --config < flags), to check a deployment against the
    report that chose it."""

    model: ModelRef
    policy: dict[str, Any] = Field(description="the effective ServePolicy (redis_url masked)")
    default_deadline_ms: float | None = Field(description=(
        "deadline of a request that names no timeout_ms (None until a service time is known)"))
    worker_kind: Literal["thread", "process"] = Field(description=(
        "where batches run: the policy's worker_kind with auto resolved for this model"))
    padding_rule: str | None = Field(default=None, description=(
        "which requests may share a batch, as the warm-up measured it on this machine "
        "(serve/batch_shape.py); None before the warm-up or for non-text models"))


class ModelCard(BaseModel):
    """What /v1/model shows: the model's identity, never a path on the server's disk."""

    model_config = ConfigDict(extra="allow")

    id: str
    version: str
    kind: str
    task: str
    runtime: str
    precision: str
    input_names: list[str]
    max_length: int | None = None
    max_position: int | None = None
    manifest: dict[str, Any] | None = Field(default=None, description=(
        "the variant's manifest.json, absolute paths reduced to their last part"))


class PurgeResponse(BaseModel):
    scope: Literal["version", "model", "all"]
    purged: dict[str, int] = Field(description="entries deleted per layer; -1: unreachable")


_ERRORS = {
    400: "body is not JSON, nests too deep, or holds an invalid number or Unicode escape",
    401: "missing or wrong API key",
    403: "admin route, and no API key is configured (serve with --api-key-env)",
    408: "the request body did not arrive in time",
    413: "request body over the size limit",
    422: "invalid field or input (or the model failed on these inputs alone)",
    429: "queue full; see Retry-After",
    500: "the model returned the wrong number of outputs",
    503: "shed: overloaded, deadline cannot be met, or shutting down; see Retry-After",
}
_TIMING = {"Server-Timing": {"description": "queue, preprocess, inference and postprocess "
                             "durations in ms", "schema": {"type": "string"}}}
_RETRY = {"Retry-After": {"description": "seconds", "schema": {"type": "string"}}}


def openapi_schema(request_model: type[PredictRequest] = PredictRequest, *,
                   secured: bool = False, title: str = "infertune serve",
                   version: str = "1") -> dict[str, Any]:
    """The document for an app whose predict bodies validate with ``request_model``;
    ``secured``: an API key is configured."""
    schemas: dict[str, Any] = {}
    ref = {name: _ref(model, schemas) for name, model in (
        ("predict", request_model), ("purge", PurgeRequest), ("error", ErrorBody),
        ("predicted", PredictResponse), ("health", HealthBody), ("ready", ReadyBody),
        ("card", ModelCard), ("purged", PurgeResponse), ("config", ConfigBody))}

    def op(summary: str, ok: dict[str, Any], codes: tuple[int, ...], path: str,
           body: str | None = None) -> dict[str, Any]:
        guarded = path not in OPEN_PATHS and (secured or path in ADMIN_PATHS)
        codes = codes + ((401,) if secured and guarded else ())
        codes = codes + ((403,) if path in ADMIN_PATHS and not secured else ())
        out: dict[str, Any] = {"summary": summary, "responses": {"200": ok, **{
            str(c): _json(_ERRORS[c], ref["error"], retry=c in (429, 503))
            for c in sorted(codes)}}}
        if secured and guarded:
            out["security"] = [{"apiKey": []}, {"bearer": []}]
        if body is not None:
            out["requestBody"] = {"required": True,
                                  "content": {"application/json": {"schema": ref[body]}}}
        return out

    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "paths": {
            "/v1/predict": {"post": op("Run the model on a list of inputs",
                                       _json("outputs, one per input", ref["predicted"]),
                                       (400, 408, 413, 422, 429, 500, 503), "/v1/predict",
                                       body="predict")},
            "/healthz": {"get": op("Liveness", _json("alive", ref["health"]), (), "/healthz")},
            "/readyz": {"get": op("Readiness (after warm-up), the default deadline and "
                                  "warnings", _json("ready", ref["ready"]), (503,), "/readyz")},
            "/metrics": {"get": op("Prometheus metrics", {
                "description": "text exposition", "headers": _TIMING,
                "content": {"text/plain": {"schema": {"type": "string"}}}}, (), "/metrics")},
            "/v1/model": {"get": op("The served model's identity (and variant manifest)",
                                    _json("model card", ref["card"]), (), "/v1/model")},
            "/v1/config": {"get": op("The effective serving configuration (model and policy)",
                                     _json("configuration", ref["config"]), (), "/v1/config")},
            "/v1/cache/purge": {"post": op("Purge cache entries: this version, this model, or "
                                           "all (admin)", _json("entries purged per layer",
                                                                ref["purged"]),
                                           (400, 408, 413, 422), "/v1/cache/purge",
                                           body="purge")},
            "/openapi.json": {"get": op("This document", _json("OpenAPI 3.1", {"type": "object"}),
                                        (), "/openapi.json")},
        },
        "components": {"schemas": schemas},
    }
    if secured:
        doc["components"]["securitySchemes"] = {
            "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
            "bearer": {"type": "http", "scheme": "bearer"},
        }
    return doc


def _ref(model: type[BaseModel], schemas: dict[str, Any]) -> dict[str, str]:
    schema = model.model_json_schema(ref_template=REF)
    schemas.update(schema.pop("$defs", {}))
    name = model.__name__
    schemas[name] = schema
    return {"$ref": REF.format(model=name)}


def _json(description: str, schema: dict[str, Any], retry: bool = False) -> dict[str, Any]:
    return {"description": description, "headers": {**_TIMING, **(_RETRY if retry else {})},
            "content": {"application/json": {"schema": schema}}}
