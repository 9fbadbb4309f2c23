"""A bf16 OpenVINO model keeps finite what float32's lowest value stands for: the attention
mask's finfo(float32).min rounds to -inf in bf16 and 0 * -inf made every MiniLM output NaN."""

from __future__ import annotations

import numpy as np
import pytest

ov = pytest.importorskip("openvino")

from infertune.models.openvino_runner import (  # noqa: E402
    FINITE_STAND_IN,
    clamp_overflowing_constants,
)


def _masked_model() -> object:
    from openvino import opset13 as ops

    mask = ops.parameter([1, 4], np.float32, name="mask")
    lowest = ops.constant(np.array(np.finfo(np.float32).min, dtype=np.float32))
    ordinary = ops.constant(np.array([1.0, -2.0, 3.0, 4.0], dtype=np.float32))
    added = ops.multiply(ops.subtract(ops.constant(np.float32(1.0)), mask), lowest)
    return ov.Model([ops.add(added, ordinary)], [mask], "masked")


def _constants(model) -> list[np.ndarray]:
    return [op.get_data().copy() for op in model.get_ordered_ops()
            if op.get_type_name() == "Constant"]


def test_only_the_overflowing_constant_is_replaced_by_a_finite_stand_in() -> None:
    model = _masked_model()
    assert clamp_overflowing_constants(model) == 1
    values = sorted(float(v) for c in _constants(model) for v in c.ravel())
    assert values == [float(np.float32(-FINITE_STAND_IN)), -2.0, 1.0, 1.0, 3.0, 4.0]
    assert clamp_overflowing_constants(model) == 0  # nothing left to replace


def _run(model) -> np.ndarray:
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return compiled(np.array([[1.0, 1.0, 0.0, 0.0]], dtype=np.float32))[0]


def test_the_clamped_model_answers_as_the_original_in_f32_where_the_mask_is_one() -> None:
    model = _masked_model()
    before = _run(model)
    clamp_overflowing_constants(model)
    after = _run(model)
    assert np.isfinite(after).all()
    assert after[0, :2].tolist() == before[0, :2].tolist()
    assert (after[0, 2:] == np.float32(-FINITE_STAND_IN)).all()
