"""Request parsing and validation: every problem becomes one 4xx status and one line.

The parser cannot raise out of a handler: nesting depth is counted on the raw bytes before
``json.loads`` runs (a 100,000-deep array would otherwise hit Python's recursion limit), number
hooks refuse what JSON allows but a model cannot take (``1e999`` -> inf, ``NaN``, integers too
long to convert), and strings are checked for lone surrogate escapes (``"\\ud800"`` is valid
JSON but cannot be encoded to UTF-8 by a tokenizer or a cache key).

The request schema is one pydantic model per served model, built by ``request_model`` from the
model's kind and task (strings, or [query, passage] pairs for a reranker, for text models;
arrays of the example's shape for tensor models); the
same class validates requests and generates the OpenAPI document (serve/openapi.py). Inputs are
checked before they are queued, so a bad input is refused alone and never fails a batch.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema, create_model

from infertune.config import ServePolicy
from infertune.data.text_inputs import PAIR_EXAMPLE, Accepts, accepts, as_text_input
from infertune.errors import IncompatibleInputError
from infertune.models.adapter import Adapter
from infertune.serve.cascade import Tier
from infertune.serve.queue import Priority

MAX_DEPTH = 32  # a tensor input is ~4 deep; 32 leaves room without risking recursion
MAX_INT_DIGITS = 18  # fits int64; Python refuses to convert very long digit strings anyway
MAX_TIMEOUT_MS = 3_600_000.0
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_ABS_PATH = re.compile(r"(?<![\w.:/])(?:/[^\s/'\"]+){2,}")
_OPEN = frozenset(b"[{")
_CLOSE = frozenset(b"]}")


class BadRequest(Exception):
    """A request refused before queueing: ``status`` (4xx) and a one-line reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _NumberRefused(ValueError):
    pass


class PredictRequest(BaseModel):
    """The body of POST /v1/predict (``inputs`` is specialised per model by request_model)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    inputs: list[Any] = Field(min_length=1)
    priority: Priority = Field(default="normal", description="high is served first and sheds "
                               "low when the queue is full")
    timeout_ms: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_MS, description=(
        "deadline from arrival; default: the policy's timeout_ms, else the overload bound "
        "(max_wait_ms + 3 batch service times, shown on /readyz)"))
    tier: Tier = Field(default="standard", description="cascade tier (fast model first)")
    # text models: what one input may be (a string, a pair, either); None for tensor models.
    # Checked before the schema, so a string sent to a reranker gets one plain line, not
    # pydantic's error per union member.
    text_accepts: ClassVar[Accepts | None] = None
    served_task: ClassVar[str] = ""


class PurgeRequest(BaseModel):
    """The body of POST /v1/cache/purge: what to delete is always said explicitly."""

    model_config = ConfigDict(extra="forbid", strict=True)

    scope: Literal["version", "model", "all"] = Field(description=(
        "version: this model version's entries; model: every version of this model; all: "
        "every model's entries in the shared Redis"))
    layer: Literal["lru", "redis", "all"] = "all"


def parse_json(body: bytes) -> Any:
    """``body`` as JSON, or BadRequest(400) naming the problem; never raises anything else."""
    # every level opens a bracket, so a body with few brackets needs no scan (the scan cost
    # ~0.15 ms per request, more than parsing a one-sentence body)
    few = body.count(b"[") + body.count(b"{") <= MAX_DEPTH
    depth = 0 if few else nesting_depth(body)
    if depth > MAX_DEPTH:
        raise BadRequest(400, f"body nests {depth} levels deep; the limit is {MAX_DEPTH}; "
                         "flatten the input")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(400, f"body is not UTF-8 (byte {exc.start}); send UTF-8 JSON") from exc
    try:
        data = json.loads(text, parse_float=_finite_float, parse_int=_bounded_int,
                          parse_constant=_no_constant)
    except _NumberRefused as exc:
        raise BadRequest(400, str(exc)) from exc
    except json.JSONDecodeError as exc:
        raise BadRequest(400, f"body is not valid JSON ({exc.msg} at character {exc.pos}); "
                         "send {\"inputs\": [...]}") from exc
    if _SURROGATE_ESCAPE.search(body):
        _check_unicode(data, "")
    return data


def nesting_depth(body: bytes) -> int:
    """The deepest bracket nesting outside JSON strings (UTF-8 continuation bytes are never
    quotes, backslashes or brackets, so scanning bytes is exact)."""
    if len(body) < 2 * MAX_DEPTH and body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
        return 0  # cannot be too deep; skip the scan for small bodies
    outside = np.frombuffer(_STRING.sub(b"", body), dtype=np.uint8)
    steps = (np.isin(outside, list(_OPEN)).astype(np.int32)
             - np.isin(outside, list(_CLOSE)).astype(np.int32))
    return int(np.cumsum(steps).max(initial=0))


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NumberRefused(f"number {text[:20]} is out of range (it would be infinite); "
                             "send a finite number")
    return value


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _NumberRefused(f"integer with {digits} digits; the limit is {MAX_INT_DIGITS}; "
                             "send a float or a smaller number")
    return int(text)


def _no_constant(name: str) -> float:
    raise _NumberRefused(f"{name} is not a number JSON allows here; send a finite number")


def _check_unicode(value: Any, where: str) -> None:
    """Raise BadRequest(400) at the first string (or key) holding a lone surrogate."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            _encodable(item, path or "body")
        elif isinstance(item, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(item))
        elif isinstance(item, dict):
            for key, v in item.items():
                _encodable(key, f"a field name in {path or 'the body'}")
                stack.append((v, f"{path}.{key}" if path else key))


def _encodable(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadRequest(400, f"{where} has an invalid Unicode escape (a lone surrogate at "
                         f"character {exc.start}); send UTF-8 text or a complete \\uD8xx\\uDCxx "
                         "pair") from exc


def request_model(adapter: Adapter, policy: ServePolicy) -> type[PredictRequest]:
    """The PredictRequest subclass for ``adapter``: its ``inputs`` items typed by model kind,
    with the policy's limits, so the schema says exactly what the server accepts."""
    wanted = accepts(adapter.info.task) if adapter.info.kind == "text" else None
    item: Any = _text_item(wanted, policy) if wanted is not None else _tensor_item(adapter)
    inputs = Annotated[list[item], Field(min_length=1, max_length=policy.max_inputs,
                                         description="one item per input")]
    model: type[PredictRequest] = create_model("PredictRequest", __base__=PredictRequest,
                                               inputs=(inputs, ...))
    model.text_accepts = wanted
    model.served_task = adapter.info.task
    return model


def _text_item(wanted: Accepts, policy: ServePolicy) -> Any:
    """One text input's type. Strings only: a plain pydantic string. Where pairs are allowed
    the item is checked by ``_check_text_items`` (one plain line per problem, where a pydantic
    union gives one error per member) and only documented here."""
    text: dict[str, Any] = {"type": "string", "maxLength": policy.max_input_chars}
    if wanted == "text":
        return Annotated[str, Field(max_length=policy.max_input_chars)]
    pair = [
        {"type": "array", "items": text, "minItems": 2, "maxItems": 2,
         "description": "[query, passage]"},
        {"type": "object", "properties": {"query": text, "passage": text},
         "required": ["query", "passage"], "additionalProperties": False},
        {"type": "object", "properties": {"text": text, "text_pair": text},
         "required": ["text", "text_pair"], "additionalProperties": False},
    ]
    forms = pair if wanted == "pair" else [text, *pair]
    return Annotated[Any, WithJsonSchema({"anyOf": forms, "description": (
        "a (query, passage) pair" if wanted == "pair" else "a string or a (query, passage) pair")})]


def _check_text_items(items: Any, wanted: Accepts | None, task: str, limit: int) -> None:
    """Each text input's form against what the model's task accepts, and each string's
    length: 422 with one line."""
    if wanted in (None, "text") or not isinstance(items, list):
        return  # a strings-only schema is checked by pydantic itself
    forms = "a [query, passage] pair of strings" if wanted == "pair" else \
        "a string or a [query, passage] pair of strings"
    for i, item in enumerate(items):
        if isinstance(item, str) and wanted == "pair":
            raise BadRequest(422, f"inputs[{i}] is a single string; this {task} model (a "
                             "cross-encoder) scores [query, passage] pairs, e.g. "
                             f"{{\"inputs\": [{PAIR_EXAMPLE}]}}")
        try:
            read = as_text_input(item, f"inputs[{i}]")
        except IncompatibleInputError as exc:
            if isinstance(item, dict):  # names the keys it has and the ones a pair needs
                raise BadRequest(422, str(exc)) from exc
            raise BadRequest(422, f"inputs[{i}] is {_json_type(item)}; send {forms}") from exc
        for side, text in ((f"inputs[{i}]", read),) if isinstance(read, str) else \
                ((f"inputs[{i}] query", read.query), (f"inputs[{i}] passage", read.passage)):
            if len(text) > limit:
                raise BadRequest(422, f"{side} has {len(text)} characters; the limit is "
                                 f"{limit}; shorten it")


def _tensor_item(adapter: Adapter) -> Any:
    example = getattr(adapter, "example", None)
    if not isinstance(example, dict) or not example:
        return Any
    dynamic = getattr(adapter, "dynamic_axes", None)
    types = {}
    for name, array in example.items():
        variable = (0,) if dynamic is None else tuple(dynamic.get(name, ()))
        types[name] = _array_type(np.asarray(array), variable, 0)
    if len(types) == 1:
        return next(iter(types.values()))
    fields: Any = {f"input{i}": (t, Field(alias=name)) for i, (name, t) in enumerate(types.items())}
    return create_model("TensorInputs", __config__=ConfigDict(extra="forbid", strict=True,
                                                              allow_inf_nan=False), **fields)


def _array_type(example: np.ndarray, variable: Sequence[int], axis: int) -> Any:
    if axis == example.ndim:
        return int if np.issubdtype(example.dtype, np.integer) else float
    inner = _array_type(example, variable, axis + 1)
    if axis in variable:
        return Annotated[list[inner], Field(min_length=1)]  # type: ignore[valid-type]
    n = example.shape[axis]
    return Annotated[list[inner], Field(min_length=n, max_length=n)]  # type: ignore[valid-type]


def parse_predict(body: bytes, policy: ServePolicy,
                  model: type[PredictRequest] = PredictRequest) -> PredictRequest:
    """Parse and validate the body against ``model``; raises BadRequest. The inputs are kept
    as sent (validation only checks them), so adapters receive plain JSON values."""
    data = parse_json(body)
    if not isinstance(data, dict):
        raise BadRequest(422, "body must be a JSON object like {\"inputs\": [...]}")
    _check_text_items(data.get("inputs"), model.text_accepts, model.served_task,
                      policy.max_input_chars)
    try:
        checked = model.model_validate(data)
    except ValidationError as exc:
        raise BadRequest(*_one_line(exc, policy)) from exc
    return PredictRequest(inputs=data["inputs"], priority=checked.priority,
                          timeout_ms=checked.timeout_ms, tier=checked.tier)


def check_inputs(inputs: list[Any], adapter: Adapter, policy: ServePolicy) -> None:
    """What the schema cannot say: token counts (text) and the adapter's own shape check."""
    if adapter.info.kind == "text":
        _check_tokens(inputs, adapter, policy)
        return
    for i, item in enumerate(inputs):
        try:
            adapter.preprocess([item])  # stacks one example: the cheapest exact shape check
        except Exception as exc:  # noqa: BLE001 - whatever one input breaks, it is refused alone
            raise BadRequest(422, f"inputs[{i}] does not fit the model's input: "
                             f"{_first_line(exc)}") from exc


def _check_tokens(inputs: list[Any], adapter: Adapter, policy: ServePolicy) -> None:
    limit = adapter.info.max_length
    counter = getattr(adapter, "token_lengths", None)
    if policy.on_long_input == "reject" and limit and counter is not None:
        for i, n in enumerate(counter(inputs)):
            if n > limit:
                raise BadRequest(422, f"inputs[{i}] has {n} tokens; the model takes at most "
                                 f"{limit}; shorten it (or serve with on_long_input: truncate)")


def _first_line(exc: BaseException) -> str:
    """An exception's first line for a client: at most 200 characters, and an absolute path
    of the server's disk (a loader's or a library's message) cut to its last part."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    text = _ABS_PATH.sub(lambda m: PurePosixPath(m.group(0)).name, text)
    return text if len(text) <= 200 else text[:197] + "..."


def _json_type(value: Any) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", dict: "an object",
             list: "an array", type(None): "null", str: "a string"}
    return names.get(type(value), type(value).__name__)


def _field(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def _one_line(exc: ValidationError, policy: ServePolicy) -> tuple[int, str]:
    err = exc.errors()[0]
    field = _field(err["loc"])
    kind = err["type"]
    given = err.get("input")
    if kind == "extra_forbidden":
        allowed = "inputs, priority, timeout_ms, tier" if len(err["loc"]) == 1 else "the inputs"
        return 422, f"unknown field {field!r}; allowed: {allowed}"
    if kind == "missing":
        return 422, f"{field} is required"
    if field == "inputs" and kind == "too_short":
        return 422, "inputs is empty; send at least one input"
    if field == "inputs" and kind == "too_long":
        return 422, (f"{len(given) if isinstance(given, list) else 'too many'} inputs in one "
                     f"request; the limit is {policy.max_inputs}; split the request")
    if kind == "string_too_long":
        return 422, (f"{field} has {len(given) if isinstance(given, str) else 'too many'} "
                     f"characters; the limit is {policy.max_input_chars}; shorten it")
    if kind == "literal_error":
        return 422, f"{field} = {given!r}; use one of {err['ctx']['expected']}"
    if field.startswith("inputs[") and kind.endswith("_type"):
        return 422, f"{field} is {_json_type(given)}; {err['msg'].lower()}"
    shown = repr(given)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return 422, f"{field} = {shown}: {err['msg']}"


def parse_purge(body: bytes) -> PurgeRequest:
    """The purge body names its scope: {"scope": "version" | "model" | "all"}."""
    data = parse_json(body) if body.strip() else None
    if not isinstance(data, dict):
        raise BadRequest(422, "purge needs a JSON body naming the scope: {\"scope\": "
                         "\"version\"} (this model version), \"model\" (all its versions) or "
                         "\"all\" (every model)")
    try:
        return PurgeRequest.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = _field(err["loc"])
        if err["type"] == "literal_error":
            raise BadRequest(422, f"{field} = {err.get('input')!r}; use one of "
                             f"{err['ctx']['expected']}") from exc
        if err["type"] == "missing":
            raise BadRequest(422, f"{field} is required: 'version', 'model' or 'all'") from exc
        raise BadRequest(422, f"{field}: {err['msg']}") from exc
