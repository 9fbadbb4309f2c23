"""The one serialisation of infertune's dataclasses: ``Serial``, a mixin that writes a
dataclass's fields to JSON-ready values and reads them back by its type annotations, so the
field list is written once (in the class) and never copied into a ``to_dict``/``from_dict``.

    @dataclass
    class Estimate(Serial):
        value: float
        low: float | None = None

    Estimate(1.0).to_dict() == {"value": 1.0, "low": None}
    Estimate.from_dict({"value": 1}) == Estimate(1.0)

What it does, per annotation: a nested dataclass, list/tuple/set/dict of them, ``X | None``,
unions (the first member that reads the value), Enum (by value), Path (as str), float (an int
is widened), Literal (checked), ``Any`` (as is); a pydantic model by ``model_dump(mode="json")``
and ``model_validate``. A field's ``metadata`` may hold ``key`` (its JSON name), ``skip``
(a live handle that is never written; it must have a default) or ``omit_none`` (not written when
None). A class's ``DERIVED`` names properties written beside the fields and ignored on reading.
A pydantic model with its own ``to_dict``/``from_dict`` (the scenario, the report) is written and
read by them. A class that must add to its fields (a schema id) keeps its own pair and builds
it on ``encode_fields``/``decode_fields``.

Reading ignores keys the class does not know, so a file written by a newer infertune still
loads the fields this one knows; a missing required field or a value of the wrong type is a
``DataError`` that names the class, the field and what was found.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin

from infertune.errors import DataError

T = TypeVar("T", bound="Serial")


class Serial:
    """Mixin for dataclasses: ``to_dict()`` / ``from_dict(data)`` from the fields (see the module
    docstring for what each annotation becomes)."""

    DERIVED: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        out = encode(self)
        assert isinstance(out, dict)
        return out

    @classmethod
    def from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
        return decode(cls, data)


_SERIAL_FROM_DICT = Serial.__dict__["from_dict"].__func__


def encode(value: Any) -> Any:
    """``value`` as JSON-ready data (dicts, lists, str, numbers, bools, None)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        own = getattr(type(value), "to_dict", None)
        if own is not None and own is not Serial.to_dict:  # a class that keeps its own
            return own(value)
        return _encode_dataclass(value)
    if isinstance(value, enum.Enum):
        return encode(value.value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {(k.value if isinstance(k, enum.Enum) else k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [encode(v) for v in value]
    if hasattr(value, "model_dump"):  # a pydantic model, by its own to_dict when it has one
        own = getattr(value, "to_dict", None)
        return own() if callable(own) else value.model_dump(mode="json")
    if hasattr(value, "tolist"):  # a numpy scalar or array
        return value.tolist()
    return value


def encode_fields(obj: Any) -> dict[str, Any]:
    """A dataclass's fields as ``Serial.to_dict`` writes them, for a class that keeps its own
    ``to_dict`` to add to them (calling ``Serial.to_dict`` from it would come back to it)."""
    return _encode_dataclass(obj)


def decode_fields(tp: type[T], data: Mapping[str, Any]) -> T:
    """``tp`` read from its fields as ``Serial.from_dict`` reads them, for a class that keeps
    its own ``from_dict`` to check or add to them."""
    out: T = _decode_dataclass(tp, data, _name(tp))
    return out


def _encode_dataclass(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        if f.metadata.get("skip"):
            continue
        v = getattr(obj, f.name)
        if v is None and f.metadata.get("omit_none"):
            continue
        out[f.metadata.get("key", f.name)] = encode(v)
    for name in getattr(obj, "DERIVED", ()):
        out[name] = encode(getattr(obj, name))
    return out


def decode(tp: Any, data: Any, where: str = "") -> Any:
    """``data`` (as ``encode`` wrote it) read back as ``tp``; DataError when it does not fit."""
    where = where or _name(tp)
    if tp is Any or tp is object or isinstance(tp, TypeVar):
        return data
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return _decode_union(tp, data, where)
    if origin is Literal:
        if data not in get_args(tp):
            raise DataError(f"{where}: {data!r} is not one of {list(get_args(tp))}")
        return data
    if origin is ClassVar:
        return data
    if origin in (list, set, frozenset, tuple) or tp in (list, tuple, set, frozenset):
        return _decode_sequence(tp, origin or tp, data, where)
    if origin in (dict, Mapping) or origin is typing.Mapping or tp is dict:
        return _decode_mapping(tp, data, where)
    if isinstance(tp, type):
        return _decode_class(tp, data, where)
    return data  # an annotation this reader has no rule for (e.g. a Protocol): kept as is


def _decode_class(tp: type, data: Any, where: str) -> Any:
    if dataclasses.is_dataclass(tp):
        if isinstance(data, tp):
            return data
        own = getattr(tp, "from_dict", None)
        if own is not None and getattr(own, "__func__", None) is not _SERIAL_FROM_DICT:
            return own(data)  # a class that keeps its own reader
        return _decode_dataclass(tp, data, where)
    if issubclass(tp, enum.Enum):
        try:
            return tp(data)
        except ValueError:
            raise DataError(f"{where}: {data!r} is not one of "
                            f"{[m.value for m in tp]}") from None
    if hasattr(tp, "model_validate"):  # a pydantic model, by its own from_dict when it has one
        if isinstance(data, tp):
            return data
        own = getattr(tp, "from_dict", None)
        return own(data) if callable(own) else tp.model_validate(data)
    if tp is Path:
        _expect(isinstance(data, (str, Path)), where, "a path", data)
        return Path(data)
    if tp is float:
        _expect(isinstance(data, (int, float)) and not isinstance(data, bool), where,
                "a number", data)
        return float(data)
    if tp is int:
        _expect(isinstance(data, int) and not isinstance(data, bool), where, "an integer", data)
        return data
    if tp is bool:
        _expect(isinstance(data, bool), where, "true or false", data)
        return data
    if tp is str:
        _expect(isinstance(data, str), where, "a string", data)
        return data
    if tp is type(None):
        _expect(data is None, where, "null", data)
        return None
    from_dict = getattr(tp, "from_dict", None)
    if callable(from_dict) and isinstance(data, Mapping):
        return from_dict(data)
    _expect(isinstance(data, tp), where, tp.__name__, data)
    return data


def _decode_dataclass(tp: type, data: Any, where: str) -> Any:
    _expect(isinstance(data, Mapping), where, "an object", data)
    hints = _hints(tp)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(tp):
        if not f.init or f.metadata.get("skip"):
            continue
        key = f.metadata.get("key", f.name)
        if key in data:
            kwargs[f.name] = decode(hints[f.name], data[key], f"{_name(tp)}.{key}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise DataError(f"{where}: the field {key!r} is missing; the file was not written "
                            "by this version of infertune or was edited by hand")
    return tp(**kwargs)


def _decode_union(tp: Any, data: Any, where: str) -> Any:
    members = get_args(tp)
    if data is None and type(None) in members:
        return None
    errors = []
    for member in members:
        if member is type(None):
            continue
        try:
            return decode(member, data, where)
        except (DataError, TypeError, ValueError) as exc:
            errors.append(str(exc))
    raise DataError(errors[0] if len(errors) == 1 else
                    f"{where}: {_short(data)} fits none of {[_name(m) for m in members]}")


def _decode_sequence(tp: Any, origin: Any, data: Any, where: str) -> Any:
    _expect(isinstance(data, (list, tuple)), where, "a list", data)
    args = get_args(tp)
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        if len(args) != len(data):
            raise DataError(f"{where}: expected {len(args)} items, found {len(data)}")
        pairs = enumerate(zip(args, data, strict=True))
        return tuple(decode(a, v, f"{where}[{i}]") for i, (a, v) in pairs)
    item = args[0] if args else Any
    values = [decode(item, v, f"{where}[{i}]") for i, v in enumerate(data)]
    return values if origin is list else origin(values)


def _decode_mapping(tp: Any, data: Any, where: str) -> Any:
    _expect(isinstance(data, Mapping), where, "an object", data)
    args = get_args(tp)
    key_tp, value_tp = args if len(args) == 2 else (Any, Any)
    return {_decode_key(key_tp, k, where): decode(value_tp, v, f"{where}[{k!r}]")
            for k, v in data.items()}


def _decode_key(tp: Any, key: Any, where: str) -> Any:
    # JSON object keys are strings: an int- or float-keyed dict comes back from its text
    if tp is int and isinstance(key, str):
        return int(key)
    if tp is float and isinstance(key, str):
        return float(key)
    return decode(tp, key, f"{where} key")


@functools.cache
def _hints(tp: type) -> dict[str, Any]:
    # without a globalns, get_type_hints resolves each base's annotations in its own module
    return typing.get_type_hints(tp)


def _expect(ok: bool, where: str, what: str, data: Any) -> None:
    if not ok:
        raise DataError(f"{where}: expected {what}, found {_short(data)}")


def _short(data: Any) -> str:
    text = repr(data)
    return text if len(text) <= 60 else text[:57] + "..."


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp)
