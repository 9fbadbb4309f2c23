"""The provenance check follows derivations, and a derived figure cannot slip past it by
naming none: a figure labelled measured in a unit only a derivation gives (a % change, a cost
per 1,000 requests, a count of instances, a rate per worker) must carry its ``inputs``."""

from __future__ import annotations

import pytest

from infertune.report.provenance import DERIVED_UNITS, provenance_problems
from infertune.report.schema import Figure


def _measured(value: float, unit: str, inputs: list[Figure] | None = None) -> Figure:
    return Figure.measured(value, unit, "test cpu", 200, what="w", artifact="profile.json",
                           inputs=inputs)


P50_A = _measured(10.0, "ms")
P50_B = _measured(8.0, "ms")


@pytest.mark.parametrize("unit", ["% change in p50", "USD per 1,000 requests", "instances",
                                  "requests/s per worker"])
def test_a_measured_figure_in_a_derived_unit_without_inputs_is_a_problem(unit: str) -> None:
    assert unit.startswith(DERIVED_UNITS)
    bare = {"figure": _measured(-20.0, unit).to_dict()}
    assert provenance_problems(bare) == [
        f"$.figure: labelled measured in {unit!r}, a unit only a derivation gives, without "
        "the figures it was derived from (inputs)"]
    derived = {"figure": _measured(-20.0, unit, inputs=[P50_A, P50_B]).to_dict()}
    assert provenance_problems(derived) == []


def test_an_estimate_or_a_directly_measured_unit_needs_no_inputs() -> None:
    stated = Figure(value=0.05, unit="USD per 1,000 requests", source="estimate",
                    basis="stated in the scenario")
    assert provenance_problems({"a": stated.to_dict(), "b": P50_A.to_dict(),
                                "c": _measured(29.5, "requests/s").to_dict()}) == []


def test_a_derivation_from_an_estimate_is_still_reported() -> None:
    guess = Figure(value=10.0, unit="ms", source="estimate", basis="a guess")
    wrong = {"figure": _measured(-20.0, "% change in p50", inputs=[guess, P50_B]).to_dict()}
    assert provenance_problems(wrong) == [
        "$.figure: labelled measured but derived from the estimate at $.figure.inputs[0]; "
        "label it an estimate"]
