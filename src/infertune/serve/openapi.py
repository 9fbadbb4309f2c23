"""The OpenAPI 3.1 description of the serving API, written by hand (starlette has no schema
generator); a test checks that its paths and methods are exactly the app's routes."""

from __future__ import annotations

from typing import Any

_ERROR = {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}
_TIMING_HEADER = {
    "Server-Timing": {
        "description": "queue, preprocess, inference and postprocess durations in ms",
        "schema": {"type": "string"},
    }
}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "headers": _TIMING_HEADER,
            "content": {"application/json": {"schema": _ERROR}}}


PREDICT_REQUEST = {
    "type": "object",
    "required": ["inputs"],
    "additionalProperties": False,
    "properties": {
        "inputs": {"type": "array", "minItems": 1, "items": {},
                   "description": "one item per input: a string for text models, an array "
                   "(or an object of arrays by input name) for tensor models"},
        "priority": {"enum": ["high", "normal", "low"], "default": "normal"},
        "timeout_ms": {"type": "number", "exclusiveMinimum": 0,
                       "description": "deadline; default from the serving policy"},
        "tier": {"enum": ["fast", "standard", "quality"], "default": "standard"},
    },
}
PREDICT_RESPONSE = {
    "type": "object",
    "required": ["outputs", "model", "cached"],
    "properties": {
        "outputs": {"type": "array", "items": {}},
        "model": {"type": "object", "properties": {"id": {"type": "string"},
                                                   "version": {"type": "string"}}},
        "cached": {"type": "array", "items": {"type": "boolean"}},
    },
}


def _json_ok(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"description": description, "headers": _TIMING_HEADER,
            "content": {"application/json": {"schema": schema or {"type": "object"}}}}


def openapi_schema(title: str = "infertune serve", version: str = "1") -> dict[str, Any]:
    secured = [{"apiKey": []}, {"bearer": []}]
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "components": {"securitySchemes": {
            "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
            "bearer": {"type": "http", "scheme": "bearer"},
        }},
        "paths": {
            "/v1/predict": {"post": {
                "summary": "Run the model on a list of inputs",
                "security": secured,
                "requestBody": {"required": True, "content": {
                    "application/json": {"schema": PREDICT_REQUEST}}},
                "responses": {
                    "200": _json_ok("outputs, one per input", PREDICT_RESPONSE),
                    "400": _error("body is not JSON"),
                    "401": _error("missing or wrong API key"),
                    "413": _error("request or input too large"),
                    "422": _error("invalid field or input"),
                    "429": _error("queue full; see Retry-After"),
                    "500": _error("the model failed on this request's batch"),
                    "503": _error("shed: deadline cannot be met, or shutting down"),
                },
            }},
            "/healthz": {"get": {"summary": "Liveness", "responses": {"200": _json_ok("alive")}}},
            "/readyz": {"get": {"summary": "Readiness (after warm-up)", "responses": {
                "200": _json_ok("ready"), "503": _error("warming up")}}},
            "/metrics": {"get": {"summary": "Prometheus metrics", "security": secured,
                                 "responses": {"200": {"description": "text exposition"}}}},
            "/v1/model": {"get": {"summary": "The served variant's manifest (or model info)",
                                  "security": secured, "responses": {"200": _json_ok("manifest")}}},
            "/v1/cache/purge": {"post": {
                "summary": "Purge the cache (admin)", "security": secured,
                "requestBody": {"required": False, "content": {"application/json": {"schema": {
                    "type": "object",
                    "properties": {"layer": {"enum": ["lru", "redis", "all"]}}}}}},
                "responses": {"200": _json_ok("entries purged per layer")},
            }},
            "/openapi.json": {"get": {"summary": "This document",
                                      "responses": {"200": _json_ok("OpenAPI 3.1")}}},
        },
    }
