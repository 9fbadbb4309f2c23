"""The request parser: hostile bodies get one 4xx line each, never an exception out of it."""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
import pytest

from infertune.config import ServePolicy
from infertune.models.tensor import TensorAdapter
from infertune.serve.openapi import OPEN_PATHS, openapi_schema
from infertune.serve.request_validation import (
    MAX_DEPTH,
    BadRequest,
    nesting_depth,
    parse_json,
    parse_predict,
    parse_purge,
    request_model,
)
from infertune.serve.testing import GatedAdapter

POLICY = ServePolicy(max_inputs=8, max_input_chars=50)
TEXT = request_model(GatedAdapter(), POLICY)
TENSOR_INFO = dataclasses.replace(GatedAdapter().info, kind="tensor")


def _refused(body: bytes, model=TEXT) -> BadRequest:
    with pytest.raises(BadRequest) as refused:
        parse_predict(body, POLICY, model)
    assert "\n" not in str(refused.value)
    return refused.value


def test_deep_nesting_is_refused_before_parsing_and_fast() -> None:
    deep = b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    start = time.perf_counter()
    error = _refused(deep)
    assert time.perf_counter() - start < 1.0  # numpy scan, no recursion
    assert (error.status, str(error)) == (400, "body nests 100001 levels deep; the limit is 32; "
                                                "flatten the input")
    assert nesting_depth(b'{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\"["}') == 1
    assert nesting_depth(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) == MAX_DEPTH
    assert parse_json(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None


@pytest.mark.parametrize("body, status, message", [
    (b'{"inputs": ["a"], "timeout_ms": 1e999}', 400, "number 1e999 is out of range"),
    (b'{"inputs": ["a"], "timeout_ms": -1e999}', 400, "out of range"),
    (b'{"inputs": ["a"], "timeout_ms": NaN}', 400, "NaN is not a number JSON allows"),
    (b'{"inputs": ["a"], "timeout_ms": Infinity}', 400, "Infinity is not a number"),
    (b'{"inputs": ["a"], "timeout_ms": ' + b"9" * 5000 + b"}", 400, "integer with 5000 digits"),
    (b'{"inputs": ["a"], "timeout_ms": 1e300}', 422, "timeout_ms = 1e+300"),
    (b'{"inputs": ["ok", "ok", "ok", "\\ud800 abc"]}', 400, "inputs[3] has an invalid Unicode"),
    (b'{"inputs": ["ok"], "\\udfff": 1}', 400, "a field name in the body has an invalid"),
    (b'{"inputs": ["\xff"]}', 400, "body is not UTF-8 (byte 13)"),
    (b'{"inputs": [null]}', 422, "inputs[0] is null"),
    (b'{"inputs": ["a"], "priority": "urgent"}', 422, "priority = 'urgent'; use one of"),
    (b'{"inputs": ["' + b"x" * 51 + b'"]}', 422, "inputs[0] has 51 characters; the limit is 50"),
    (json.dumps({"inputs": ["a"] * 9}).encode(), 422, "9 inputs in one request; the limit is 8"),
    (b'{"inputs": ["a"], "bad\\nkey": 1}', 422, "unknown field 'bad\\nkey'"),
    (b"", 400, "not valid JSON"),
    (b"[1]", 422, "must be a JSON object"),
])
def test_hostile_bodies_get_one_line_naming_the_problem(body: bytes, status: int,
                                                        message: str) -> None:
    error = _refused(body)
    assert error.status == status and message in str(error), str(error)


def test_valid_surrogate_pairs_and_escaped_text_are_accepted() -> None:
    request = parse_predict(b'{"inputs": ["\\ud83d\\ude00 ok", "[[[{"], "timeout_ms": 5}',
                            POLICY, TEXT)
    assert request.inputs == ["\U0001F600 ok", "[[[{"] and request.timeout_ms == 5.0


def test_tensor_models_get_a_schema_of_the_example_shape() -> None:
    adapter = TensorAdapter(info=TENSOR_INFO, runner=None,
                            example={"x": np.zeros((3, 2), np.float32)}, dynamic_axes=None)
    model = request_model(adapter, POLICY)
    items = model.model_json_schema()["properties"]["inputs"]["items"]
    assert items == {"type": "array", "minItems": 1, "items": {
        "type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "number"}}}
    assert parse_predict(b'{"inputs": [[[1, 2.5]]]}', POLICY, model).inputs == [[[1, 2.5]]]
    assert "inputs[0][0]" in str(_refused(b'{"inputs": [[[1, 2, 3]]]}', model))
    two = TensorAdapter(info=TENSOR_INFO, runner=None, dynamic_axes={"ids": (0,)},
                        example={"ids": np.zeros(4, np.int64), "mask": np.zeros(4, np.int64)})
    both = request_model(two, POLICY)
    assert parse_predict(b'{"inputs": [{"ids": [1], "mask": [1, 1, 1, 1]}]}', POLICY, both)
    assert "unknown field" in str(_refused(b'{"inputs": [{"ids": [1], "mask": [1, 1, 1, 1], '
                                           b'"x": []}]}', both))
    assert "inputs[0].ids[0]" in str(_refused(b'{"inputs": [{"ids": [1.5], '
                                              b'"mask": [1, 1, 1, 1]}]}', both))


def test_purge_names_its_scope() -> None:
    assert parse_purge(b'{"scope": "model"}').scope == "model"
    assert parse_purge(b'{"scope": "all", "layer": "lru"}').layer == "lru"
    for body, message in [(b"", "naming the scope"), (b'{"layer": "all"}', "scope is required"),
                          (b'{"scope": "everything"}', "scope = 'everything'")]:
        with pytest.raises(BadRequest, match=message):
            parse_purge(body)


def test_openapi_is_generated_from_the_validating_models_and_secured_only_with_a_key() -> None:
    open_doc = openapi_schema(TEXT, secured=False)
    schema = open_doc["components"]["schemas"]["PredictRequest"]
    # the fake is a classifier: a string, or a pair in any of its three spellings
    forms = schema["properties"]["inputs"]["items"]["anyOf"]
    assert forms[0] == {"type": "string", "maxLength": 50}
    assert [f["type"] for f in forms] == ["string", "array", "object", "object"]
    assert forms[2]["required"] == ["query", "passage"]
    assert schema["properties"]["inputs"]["maxItems"] == 8
    assert schema["additionalProperties"] is False
    assert "securitySchemes" not in open_doc["components"]
    operations = [op for path in open_doc["paths"].values() for op in path.values()]
    assert not any("security" in op for op in operations)
    assert "403" in open_doc["paths"]["/v1/cache/purge"]["post"]["responses"]
    secured = openapi_schema(TEXT, secured=True)
    guarded = {path for path, ops in secured["paths"].items()
               if any("security" in op for op in ops.values())}
    assert guarded == set(secured["paths"]) - OPEN_PATHS
    assert {"/v1/predict", "/metrics", "/v1/model", "/v1/cache/purge"} <= guarded
    assert "401" in secured["paths"]["/metrics"]["get"]["responses"]


def test_padding_estimate_counts_both_sides_of_a_pair() -> None:
    from infertune.serve.batch_shape import approx_tokens

    query, passage = "q" * 40, "p" * 400
    assert approx_tokens([[query, passage]]) == approx_tokens([query + passage]) == 110
    assert approx_tokens([{"query": query, "passage": passage}]) == 110
    assert approx_tokens([{"text": query, "text_pair": passage}, "short"]) == 110
