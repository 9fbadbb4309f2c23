"""Serial: one round trip per kind of annotation, and the errors a bad file gets."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest

from infertune.errors import DataError
from infertune.serial import Serial, decode, encode


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass
class Point(Serial):
    x: float
    y: float = 0.0


@dataclass
class Shape(Serial):
    name: str
    points: list[Point]
    colour: Colour = Colour.RED
    where: Path | None = None
    by_label: dict[str, Point] = field(default_factory=dict)
    by_size: dict[int, str] = field(default_factory=dict)
    pair: tuple[int, str] = (0, "")
    tags: tuple[str, ...] = ()
    kind: Literal["open", "closed"] = "open"
    extra: Any = None
    note: str | None = field(default=None, metadata={"omit_none": True})
    handle: object = field(default=None, metadata={"skip": True})
    renamed: int = field(default=0, metadata={"key": "n"})

    DERIVED = ("count",)

    @property
    def count(self) -> int:
        return len(self.points)


def test_a_shape_round_trips_with_every_kind_of_field() -> None:
    shape = Shape("s", [Point(1.0, 2.0), Point(3.5)], Colour.BLUE, Path("/tmp/x"),
                  {"a": Point(0.5)}, {16: "b16"}, (2, "two"), ("t1", "t2"), "closed",
                  {"any": [1, 2]}, None, handle=object(), renamed=7)
    data = shape.to_dict()
    assert data == {"name": "s", "points": [{"x": 1.0, "y": 2.0}, {"x": 3.5, "y": 0.0}],
                    "colour": "blue", "where": "/tmp/x", "by_label": {"a": {"x": 0.5, "y": 0.0}},
                    "by_size": {16: "b16"}, "pair": [2, "two"], "tags": ["t1", "t2"],
                    "kind": "closed", "extra": {"any": [1, 2]}, "n": 7, "count": 2}
    back = Shape.from_dict({**data, "by_size": {"16": "b16"}})  # as JSON writes int keys
    assert back == Shape("s", [Point(1.0, 2.0), Point(3.5)], Colour.BLUE, Path("/tmp/x"),
                         {"a": Point(0.5)}, {16: "b16"}, (2, "two"), ("t1", "t2"), "closed",
                         {"any": [1, 2]}, None, renamed=7)


def test_an_int_is_widened_to_float_and_unknown_keys_are_ignored() -> None:
    assert Point.from_dict({"x": 1, "newer_field": 3}) == Point(1.0, 0.0)
    assert isinstance(Point.from_dict({"x": 1}).x, float)


def test_numpy_values_become_plain_numbers() -> None:
    assert encode({"a": np.float32(1.5), "b": np.arange(3)}) == {"a": 1.5, "b": [0, 1, 2]}


@pytest.mark.parametrize(("data", "message"), [
    ({"y": 1.0}, "Point: the field 'x' is missing"),
    ({"x": "one"}, "Point.x: expected a number, found 'one'"),
    ({"x": True}, "Point.x: expected a number, found True"),
])
def test_a_bad_point_is_a_data_error_naming_the_field(data: dict[str, Any],
                                                     message: str) -> None:
    with pytest.raises(DataError, match="^" + message.replace(".", r"\.")):
        Point.from_dict(data)


def test_bad_enum_and_literal_values_name_the_choices() -> None:
    with pytest.raises(DataError, match=r"Shape.colour: 'green' is not one of \['red', 'blue'\]"):
        Shape.from_dict({"name": "s", "points": [], "colour": "green"})
    with pytest.raises(DataError, match=r"Shape.kind: 'ajar' is not one of"):
        Shape.from_dict({"name": "s", "points": [], "kind": "ajar"})
    with pytest.raises(DataError, match=r"Shape.points\[0\].*missing"):
        Shape.from_dict({"name": "s", "points": [{"y": 1}]})


@dataclass
class Custom(Serial):
    value: int

    def to_dict(self) -> dict[str, Any]:  # a class that keeps its own form
        return {"v": self.value}

    @classmethod
    def from_dict(cls, data: Any) -> Custom:
        return cls(int(data["v"]))


@dataclass
class Holder(Serial):
    inner: Custom
    maybe: Point | Custom | None = None


def test_a_class_with_its_own_form_is_used_inside_others() -> None:
    holder = Holder(Custom(3), Point(1.0))
    assert holder.to_dict() == {"inner": {"v": 3}, "maybe": {"x": 1.0, "y": 0.0}}
    assert Holder.from_dict(holder.to_dict()) == holder
    assert decode(Point | None, None) is None
