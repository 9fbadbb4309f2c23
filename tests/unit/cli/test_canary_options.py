"""`infertune canary`'s typed options: the gates, the step plan and its sizing, as the flags
gave them."""

from __future__ import annotations

from infertune.cli import main
from infertune.cli.canary import CanaryOptions
from infertune.rollout.canary_plan import Sizing

URL = "http://127.0.0.1:9"  # nothing listens: each case must stop before any request


def test_steps_and_their_samples_fix_the_plan() -> None:
    fixed = CanaryOptions(URL, "c", steps=(10.0, 100.0), min_step_samples=50)
    assert fixed.sizing() is None
    plan = fixed.step_plan()
    assert (plan.steps, plan.min_step_samples, plan.baseline_samples) == ((10.0, 100.0), 50, 100)
    assert fixed.gate_config().min_samples == 50  # the smaller of a step's and the baseline's


def test_otherwise_the_plan_is_sized_from_the_rate() -> None:
    sized = CanaryOptions(URL, "c", steps=(10.0, 100.0), decide_within_s=60.0,
                          rate_window_s=5.0)
    assert sized.sizing() == Sizing(decide_within_s=60.0, rate_window_s=5.0,
                                    steps=(10.0, 100.0), step_samples=None)
    assert sized.gate_config().min_samples == 100
    assert CanaryOptions(URL, "c", step_timeout_s=7.0).step_plan().step_timeout_s == 7.0


def test_falling_steps_are_refused_before_anything_is_printed_or_sent(capsys) -> None:
    assert main(["canary", "--server", URL, "--release", "c", "--steps", "50,5"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: steps must rise") and err.count("\n") == 1
