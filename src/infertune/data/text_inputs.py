"""What a text model takes as one input: a string, or a (query, passage) pair.

A cross-encoder (a reranker) reads a query and a passage together: the tokenizer encodes them
as one sequence ``[CLS] query [SEP] passage [SEP]`` with token_type_ids 0 for the query and 1
for the passage, which is how it was trained. Joining them into one string by hand is not the
same input. Requests and held-out rows spell a pair in any of three ways, all read here::

    ["what is the capital of france", "Paris is the capital."]
    {"query": "what is the capital of france", "passage": "Paris is the capital."}
    {"text": "what is the capital of france", "text_pair": "Paris is the capital."}

The model's task decides what it accepts (``accepts``): a reranker takes pairs only, an
embedding model strings only, a classifier or a regressor either (NLI and STS models read
pairs too).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

from infertune.errors import IncompatibleInputError

Accepts = Literal["text", "pair", "either"]
PAIR_KEYS = (("query", "passage"), ("text", "text_pair"))
PAIR_EXAMPLE = '["what is the capital of france", "Paris is the capital."]'


class TextPair(NamedTuple):
    """One (query, passage) input. A tuple, so it hashes, sorts and serialises as a JSON array
    ``[query, passage]``, the same form a request may send."""

    query: str
    passage: str


TextInput = str | TextPair


def accepts(task: str) -> Accepts:
    """What one input of a text model with this task may be."""
    if task == "reranking":
        return "pair"
    if task == "embedding":
        return "text"
    return "either"


def as_text_input(item: Any, where: str = "input") -> TextInput:
    """A string stays a string; a pair in any of its three spellings becomes a TextPair.
    Anything else is an IncompatibleInputError naming the accepted forms."""
    if isinstance(item, str):
        return item
    if isinstance(item, TextPair):
        return item
    if isinstance(item, list | tuple) and len(item) == 2 and all(isinstance(x, str) for x in item):
        return TextPair(item[0], item[1])
    if isinstance(item, dict):
        for first, second in PAIR_KEYS:
            if set(item) == {first, second}:
                query, passage = item[first], item[second]
                if isinstance(query, str) and isinstance(passage, str):
                    return TextPair(query, passage)
                raise IncompatibleInputError(
                    f"{where}: {first!r} and {second!r} must both be strings")
        raise IncompatibleInputError(
            f"{where} is an object with keys {sorted(item)}; a pair is "
            "{\"query\": ..., \"passage\": ...} or {\"text\": ..., \"text_pair\": ...}")
    raise IncompatibleInputError(
        f"{where} is {type(item).__name__}; send a string or a [query, passage] pair of strings")


def text_inputs(raw: Sequence[Any], task: str, model: str = "the model") -> list[TextInput]:
    """Every item read with ``as_text_input`` and checked against what the task accepts."""
    wanted = accepts(task)
    items = [as_text_input(item, f"input {i}") for i, item in enumerate(raw)]
    for i, item in enumerate(items):
        if wanted == "pair" and not isinstance(item, TextPair):
            raise IncompatibleInputError(
                f"input {i} is a single string; {model} is a {task} model (a cross-encoder) "
                f"and takes [query, passage] pairs, e.g. {PAIR_EXAMPLE}")
        if wanted == "text" and isinstance(item, TextPair):
            raise IncompatibleInputError(
                f"input {i} is a pair; {model} is an {task} model and takes one string per "
                "input")
    return items


def text_length(item: TextInput) -> int:
    """Characters in the input (both sides of a pair): the cheap length used to sort and
    bucket inputs before they are tokenised."""
    return len(item) if isinstance(item, str) else len(item.query) + len(item.passage)


def is_text_input(item: Any) -> bool:
    return isinstance(item, str | TextPair)
