"""The rollout artifacts (gate results, steps, the sized plan, the canary outcome, the A/B
report) write exactly the dicts the hand-written to_dict wrote before: the OLD_* literals were
captured by running that code on these instances, so canary.json and ab reports keep their
keys and values (the interval of a gate stays a [low, high] list); and each reads back from
its JSON (by the one serialisation, Serial) to an equal object."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infertune.rollout.ab import AbReport, Arm
from infertune.rollout.canary_plan import CanaryPlan, GateSize, Traffic
from infertune.rollout.controller import CanaryOutcome, StepReport
from infertune.rollout.gates import GateResult
from infertune.rollout.stats import Interval

ERRORS = GateResult(gate="errors", verdict="pass", estimate=-0.002,
                    interval=Interval(-0.011, 0.0075), n_canary=740, n_stable=3900, limit=0.01,
                    alpha=0.0125, what="error rate, canary - stable")
AGREEMENT = GateResult(gate="agreement", verdict="fail", estimate=0.12,
                       interval=Interval(0.061, 0.19), n_canary=300, n_stable=None, limit=0.05,
                       alpha=0.0125, what="disagreement rate of the canary")
STEP = StepReport(weight=5.0, verdict="fail", seconds=42.5, canary_answers=300,
                  gates=[ERRORS, AGREEMENT])
PLAN = CanaryPlan(
    traffic=Traffic(rate_rps=20.0, seconds=20.5, requests=410, error_rate=0.001,
                    p95_share=0.12, slowed_share=None),
    steps=(5.0, 50.0, 100.0), step_samples=737, step_seconds=[737.0, 29.5, 14.75],
    sizes=[GateSize("errors", 420, "errors 420"), GateSize("latency_p95", None, "cannot")],
    refusal="no plan decides within 300 s", explicit=True, warnings=["latency gate unsized"])
OUTCOME = CanaryOutcome(
    release="v2", decision="rolled_back", reason="agreement: sure worse", method="csq",
    alpha=0.05, thresholds_s={"p95": 0.025, "p99": None}, steps=[STEP],
    rollback_seconds=0.125, plan=PLAN)
BARE_OUTCOME = CanaryOutcome(release="v3", decision="promoted", reason="all passed",
                             method="csq", alpha=0.01, thresholds_s={})
AB = AbReport(metric="conversion", control=Arm("v1", 1000, 120, 0.12, [0.09, 0.15]),
              treatment=Arm("v2", 990, 150, 0.1515, [0.12, 0.19]), difference=0.0315,
              difference_interval=[-0.01, 0.07], alpha=0.05, decision="no decision yet",
              mde=0.02, power=0.8, needed_per_arm=4100, method="mixture")

OLD_ERRORS = {"gate": "errors", "verdict": "pass", "estimate": -0.002,
              "interval": [-0.011, 0.0075], "n_canary": 740, "n_stable": 3900, "limit": 0.01,
              "alpha": 0.0125, "what": "error rate, canary - stable"}
OLD_AGREEMENT = {"gate": "agreement", "verdict": "fail", "estimate": 0.12,
                 "interval": [0.061, 0.19], "n_canary": 300, "n_stable": None, "limit": 0.05,
                 "alpha": 0.0125, "what": "disagreement rate of the canary"}
OLD_STEP = {"weight": 5.0, "verdict": "fail", "seconds": 42.5, "canary_answers": 300,
            "gates": [OLD_ERRORS, OLD_AGREEMENT]}
OLD_PLAN = {
    "traffic": {"rate_rps": 20.0, "seconds": 20.5, "requests": 410, "error_rate": 0.001,
                "p95_share": 0.12, "slowed_share": None},
    "steps": [5.0, 50.0, 100.0], "step_samples": 737, "step_seconds": [737.0, 29.5, 14.75],
    "expected_s": 801.75, "explicit": True,
    "sizes": [{"gate": "errors", "samples": 420, "why": "errors 420"},
              {"gate": "latency_p95", "samples": None, "why": "cannot"}],
    "refusal": "no plan decides within 300 s", "warnings": ["latency gate unsized"]}
OLD_OUTCOME = {"release": "v2", "decision": "rolled_back", "reason": "agreement: sure worse",
               "method": "csq", "alpha": 0.05, "thresholds_s": {"p95": 0.025, "p99": None},
               "rollback_seconds": 0.125, "plan": OLD_PLAN, "steps": [OLD_STEP]}
OLD_BARE_OUTCOME = {"release": "v3", "decision": "promoted", "reason": "all passed",
                    "method": "csq", "alpha": 0.01, "thresholds_s": {}, "rollback_seconds": None,
                    "plan": None, "steps": []}
OLD_AB = {"metric": "conversion",
          "control": {"release": "v1", "n": 1000, "ones": 120, "rate": 0.12,
                      "interval": [0.09, 0.15]},
          "treatment": {"release": "v2", "n": 990, "ones": 150, "rate": 0.1515,
                        "interval": [0.12, 0.19]},
          "difference": 0.0315, "difference_interval": [-0.01, 0.07], "alpha": 0.05,
          "decision": "no decision yet", "mde": 0.02, "power": 0.8, "needed_per_arm": 4100,
          "method": "mixture"}

OLD: list[tuple[Any, dict[str, Any]]] = [
    (ERRORS, OLD_ERRORS), (AGREEMENT, OLD_AGREEMENT), (STEP, OLD_STEP), (PLAN, OLD_PLAN),
    (OUTCOME, OLD_OUTCOME), (BARE_OUTCOME, OLD_BARE_OUTCOME), (AB, OLD_AB),
]


@pytest.mark.parametrize(("obj", "old"), OLD, ids=lambda o: type(o).__name__)
def test_writes_and_reads_what_the_hand_written_code_wrote(obj: Any, old: dict[str, Any]
                                                           ) -> None:
    assert obj.to_dict() == old
    assert type(obj).from_dict(old) == obj


@pytest.mark.parametrize("obj", [obj for obj, _ in OLD] + [PLAN.traffic, PLAN.sizes[1],
                                                            AB.control],
                         ids=lambda o: type(o).__name__)
def test_round_trip_through_json(obj: Any) -> None:
    assert type(obj).from_dict(json.loads(json.dumps(obj.to_dict()))) == obj


def test_the_gate_interval_is_a_low_high_list_and_derived_values_are_not_read_back() -> None:
    assert GateResult.from_dict({**OLD_ERRORS, "unknown": 1}).interval == Interval(-0.011, 0.0075)
    # expected_s is computed from the steps: a stale value in the file is not believed
    assert CanaryPlan.from_dict({**OLD_PLAN, "expected_s": 1.0}).expected_s == 801.75
