"""How often does the canary controller roll back a release that is no worse (A/A), and how
often, and at which step, does it catch a degraded one? With the plan `infertune canary` sizes
from the traffic by default (rollout/canary_plan.py: the rate is measured in the baseline, the steps
and per-step samples sized to catch the default effects), or fixed --steps.

Every rollout runs the real CanaryController, gates and confidence sequences
(infertune.rollout) against a simulated server (infertune.rollout.canary_sim): requests arrive
at --rate per simulated second and split between the arms by the canary weight; each arm
draws lognormal latencies (median 10 ms, sigma 0.35 for the stable), errors (0.1%) and output
disagreement with the stable (0%) unless the scenario changes them; every canary answer is
replayed to the stable, as the router does (a request and an agreement row, not a latency
sample). The stable has served HISTORY_S seconds of the
same traffic before each rollout begins. No HTTP, simulated time: a few hundred rollouts
take seconds. Scenarios (the effect each degraded canary has):

    aa           the canary is the stable's twin                    -> a rollback is false
    latency      canary latency x1.2 (so its p95 and p99 also +20%)
    errors       canary error rate 0.1% -> 5.1% (the plan's default effect: +5 points)
    agreement    10% of canary outputs disagree with the stable's (gate limit 5%)
    conversion   business metric 10% -> 6% (feedback on every answer)
    aa-drift     the stable's twin, and the machine 1.3x slower for both arms from the 100%
                 step on (the latency gates stand on the steps below 100%) -> a rollback is
                 false

    python benchmarks/canary_stats.py                  # 200 rollouts per scenario, 20 req/s
    python benchmarks/canary_stats.py --rollouts 20 --scenarios aa,latency   # a quick look
    python benchmarks/canary_stats.py --steps 1,5,25,50,100 --min-step-samples 200 --rate 200

Targets (issue 29): A/A false rollback <= 5%; the latency and agreement canaries caught in
>= 90% of rollouts before their traffic reaches 25%; every rollout decided within 5 minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import Counter
from pathlib import Path
from typing import Any

from infertune.rollout.canary_plan import Sizing
from infertune.rollout.canary_sim import ArmModel, SimulatedRollout
from infertune.rollout.controller import CanaryController, PlanRefused, StepPlan
from infertune.rollout.gates import METHOD, GateConfig

STABLE = ArmModel(latency_median_s=0.010, latency_sigma=0.35, error_rate=0.001,
                  disagreement=0.0, conversion=0.10)
SCENARIOS: dict[str, ArmModel] = {
    "aa": STABLE,
    "latency": ArmModel(latency_median_s=0.012, conversion=0.10),
    "errors": ArmModel(error_rate=0.051, conversion=0.10),
    "agreement": ArmModel(disagreement=0.10, conversion=0.10),
    "conversion": ArmModel(conversion=0.06),
    "aa-drift": STABLE,
}
# from the step of that weight on, the releases behave so (canary_sim's from_weight)
_SLOWER = ArmModel(latency_median_s=0.013, latency_sigma=0.35, error_rate=0.001,
                   disagreement=0.0, conversion=0.10)
DRIFT: dict[str, dict[float, dict[str, ArmModel]]] = {
    "aa-drift": {100.0: {"stable": _SLOWER, "canary": _SLOWER}},
}


# the stable served this long before each rollout: the plan's latency shares come from its
# whole history, as on a server that has been up (with only the 20 s baseline, 3 of 20 plans
# were refused at 20 req/s: the shares from ~400 requests are too noisy to size from)
HISTORY_S = 300.0


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of k out of n (a fixed-sample interval: fine here, the
    count of rollouts is fixed in advance)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def run_scenario(name: str, canary: ArmModel, rollouts: int, config: GateConfig,
                 plan: StepPlan, sizing: Sizing | None, rate: float,
                 seed: int) -> dict[str, Any]:
    caught_at: Counter[float] = Counter()
    by_gate: Counter[str] = Counter()
    seconds: list[float] = []
    decided_in: list[float] = []
    before_25 = refused = 0
    for i in range(rollouts):
        sim = SimulatedRollout(STABLE, canary, rate_rps=rate, seed=seed * 100_003 + i,
                               history_s=HISTORY_S, from_weight=DRIFT.get(name))
        try:
            outcome = CanaryController(sim, sim, config, plan, clock=sim.clock,
                                       sleep=sim.sleep, sizing=sizing).run("canary")
        except PlanRefused:  # no plan fitted this baseline's measurements: no decision
            refused += 1
            continue
        decided_in.append(sim.now)
        if outcome.decision == "rolled_back":
            weight = outcome.steps[-1].weight
            caught_at[weight] += 1
            before_25 += weight < 25
            by_gate.update(g.gate for g in outcome.steps[-1].gates if g.verdict == "fail")
            if outcome.steps[-1].verdict == "timeout":
                by_gate["timeout"] += 1
            seconds.append(sim.now)
    k = sum(caught_at.values())
    low, high = wilson(k, rollouts)
    return {"scenario": name, "rollouts": rollouts, "rolled_back": k, "rate": k / rollouts,
            "rate_ci95": [low, high], "refused": refused, "before_25pct": before_25,
            "before_25pct_rate": before_25 / rollouts,
            "caught_at_step": {f"{w:g}%": c for w, c in sorted(caught_at.items())},
            "failing_gates": dict(by_gate),
            "median_simulated_s_to_rollback": sorted(seconds)[len(seconds) // 2]
            if seconds else None,
            "max_simulated_s_to_decision": max(decided_in, default=0.0)}


def _steps(text: str | None) -> tuple[float, ...] | None:
    return tuple(float(p) for p in text.split(",")) if text else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=200)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--rate", type=float, default=20.0, help="simulated requests/s")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", default=None, help="fixed steps (default: planned)")
    parser.add_argument("--min-step-samples", type=int, default=None,
                        help="new canary answers before a step may pass (default: planned)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    config = GateConfig(alpha=args.alpha)
    steps = _steps(args.steps)
    plan = StepPlan(steps=steps or StepPlan.steps,
                    min_step_samples=args.min_step_samples or StepPlan.min_step_samples)
    sizing = None if steps and args.min_step_samples else Sizing(
        steps=steps, step_samples=args.min_step_samples)
    # the plan this traffic gets, shown once (each rollout sizes its own from its baseline)
    probe = SimulatedRollout(STABLE, STABLE, rate_rps=args.rate, seed=args.seed,
                             history_s=HISTORY_S)
    shown = CanaryController(probe, probe, config, plan, clock=probe.clock, sleep=probe.sleep,
                             sizing=sizing).run("canary").plan
    print(f"method: {METHOD}; alpha={config.alpha} over the whole rollout "
          f"({config.alpha_per_gate:.4g} per gate, {len(config.gates)} gates); "
          f"{args.rate:g} simulated requests/s; {args.rollouts} rollouts per scenario")
    for line in shown.lines() if shown is not None else [
            f"fixed steps {', '.join(f'{s:g}%' for s in plan.steps)}, "
            f"{plan.min_step_samples} new canary answers per step"]:
        print(f"plan (one A/A draw): {line}")
    started = time.perf_counter()
    rows = []
    for name in args.scenarios.split(","):
        row = run_scenario(name, SCENARIOS[name], args.rollouts, config, plan, sizing,
                           args.rate, args.seed)
        rows.append(row)
        label = "false rollbacks" if name.startswith("aa") else "caught"
        low, high = row["rate_ci95"]
        print(f"{name:<11} {label}: {row['rolled_back']}/{row['rollouts']} = "
              f"{row['rate']:.3f} (95% CI {low:.3f}-{high:.3f}); plan refused "
              f"{row['refused']}; before 25%: "
              f"{row['before_25pct']}/{row['rollouts']}; at step "
              f"{row['caught_at_step'] or '-'}; gates {row['failing_gates'] or '-'}; median "
              f"{row['median_simulated_s_to_rollback']} simulated s to rollback; every "
              f"rollout decided within {row['max_simulated_s_to_decision']:.0f} simulated s")
    aa = next((r for r in rows if r["scenario"] == "aa"), None)
    if aa is not None:
        verdict = "at or below" if aa["rate"] <= args.alpha else "ABOVE"
        print(f"A/A false-rollback rate {aa['rate']:.3f} is {verdict} the configured alpha "
              f"{args.alpha}")
    print(f"({time.perf_counter() - started:.1f} s wall)")
    if args.json is not None:
        args.json.write_text(json.dumps({"alpha": args.alpha, "method": METHOD,
                                         "plan": shown.to_dict() if shown else None,
                                         "rate_rps": args.rate, "scenarios": rows},
                                        indent=2) + "\n")


if __name__ == "__main__":
    main()
