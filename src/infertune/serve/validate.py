"""Request validation for /v1/predict: every problem becomes one HTTP status and one line.

Inputs are checked before they are queued, so a bad input is refused alone and can never
reach (and fail) a batch shared with other callers.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infertune.config import ServePolicy
from infertune.errors import IncompatibleInputError
from infertune.models.base import Adapter
from infertune.serve.cascade import Tier
from infertune.serve.queue import Priority


class BadRequest(Exception):
    """A request refused before queueing: ``status`` (4xx) and a one-line reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class PredictRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    inputs: list[Any] = Field(min_length=1)
    priority: Priority = "normal"
    timeout_ms: float | None = Field(default=None, gt=0)
    tier: Tier = "standard"


def parse_predict(body: bytes, policy: ServePolicy) -> PredictRequest:
    """Parse and validate the JSON body; raises BadRequest."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(400, f"body is not valid JSON ({exc.msg if hasattr(exc, 'msg') else exc})"
                         "; send {\"inputs\": [...]}") from exc
    if not isinstance(data, dict):
        raise BadRequest(422, "body must be a JSON object like {\"inputs\": [...]}")
    if isinstance(data.get("timeout_ms"), int) and not isinstance(data["timeout_ms"], bool):
        data["timeout_ms"] = float(data["timeout_ms"])  # strict mode would refuse 500 for 500.0
    try:
        request = PredictRequest.model_validate(data)
    except ValidationError as exc:
        raise BadRequest(422, _one_line(exc)) from exc
    if len(request.inputs) > policy.max_inputs:
        raise BadRequest(422, f"{len(request.inputs)} inputs in one request; the limit is "
                         f"{policy.max_inputs}; split the request")
    return request


def check_inputs(inputs: list[Any], adapter: Adapter, policy: ServePolicy) -> None:
    """Type and size checks per input, by model kind; raises BadRequest."""
    if adapter.info.kind == "text":
        _check_texts(inputs, adapter, policy)
        return
    for i, item in enumerate(inputs):
        try:
            adapter.preprocess([item])  # stacks one example: the cheapest exact shape check
        except IncompatibleInputError as exc:
            raise BadRequest(422, f"inputs[{i}]: {exc}") from exc
        except (TypeError, ValueError) as exc:
            raise BadRequest(422, f"inputs[{i}] does not fit the model's input "
                             f"({type(exc).__name__})") from exc


def _check_texts(inputs: list[Any], adapter: Adapter, policy: ServePolicy) -> None:
    for i, item in enumerate(inputs):
        if not isinstance(item, str):
            raise BadRequest(422, f"inputs[{i}] is {_json_type(item)}; {adapter.info.id} takes "
                             "strings")
        if len(item) > policy.max_input_chars:
            raise BadRequest(413, f"inputs[{i}] has {len(item)} characters; the limit is "
                             f"{policy.max_input_chars}; shorten it")
    limit = adapter.info.max_length
    counter = getattr(adapter, "token_lengths", None)
    if policy.on_long_input == "reject" and limit and counter is not None:
        for i, n in enumerate(counter(inputs)):
            if n > limit:
                raise BadRequest(422, f"inputs[{i}] has {n} tokens; the model takes at most "
                                 f"{limit}; shorten it (or serve with on_long_input: truncate)")


def _json_type(value: Any) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", dict: "an object",
             list: "an array", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _one_line(exc: ValidationError) -> str:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "body"
    if err["type"] == "extra_forbidden":
        return f"unknown field {field!r}; allowed: inputs, priority, timeout_ms, tier"
    if err["type"] == "missing":
        return f"{field} is required"
    if err["type"] == "too_short":
        return f"{field} is empty; send at least one input"
    if err["type"] == "literal_error":
        return f"{field} = {err.get('input')!r}; use one of {err['ctx']['expected']}"
    shown = repr(err.get("input"))
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return f"{field} = {shown}: {err['msg']}"


Layer = Literal["lru", "redis", "all"]


def parse_purge(body: bytes) -> Layer:
    """The purge body is optional: {"layer": "lru" | "redis" | "all"} (default all)."""
    if not body.strip():
        return "all"
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(400, "purge body is not valid JSON; send {\"layer\": \"all\"}") from exc
    layer = data.get("layer", "all") if isinstance(data, dict) else None
    if layer not in ("lru", "redis", "all"):
        raise BadRequest(422, f"layer = {layer!r}; use one of 'lru', 'redis', 'all'")
    return layer
