"""How often does the canary controller roll back a release that is no worse (A/A), and how
often, and at which step, does it catch a degraded one?

Every rollout runs the real CanaryController, gates and confidence sequences
(infertune.rollout) against a simulated server (infertune.rollout.simulate): requests arrive
at --rate per simulated second and split between the arms by the canary weight; each arm
draws lognormal latencies (median 10 ms, sigma 0.35 for the stable), errors (0.1%) and output
disagreement with the stable (0%) unless the scenario changes them; every canary answer is
replayed to the stable, as the router does. No HTTP, simulated time: a few hundred rollouts
take seconds. Scenarios (the effect each degraded canary has):

    aa           the canary is the stable's twin                    -> a rollback is false
    latency      canary median latency x1.5 (so its p95 and p99 also x1.5)
    errors       canary error rate 0.1% -> 3%
    agreement    10% of canary outputs disagree with the stable's (gate limit 5%)
    conversion   business metric 10% -> 6% (feedback on every answer)

    python benchmarks/canary_stats.py                  # 200 rollouts per scenario
    python benchmarks/canary_stats.py --rollouts 500 --json canary_stats.json
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import Counter
from pathlib import Path
from typing import Any

from infertune.rollout.controller import CanaryController, StepPlan
from infertune.rollout.gates import METHOD, GateConfig
from infertune.rollout.simulate import ArmModel, SimulatedRollout

STABLE = ArmModel(latency_median_s=0.010, latency_sigma=0.35, error_rate=0.001,
                  disagreement=0.0, conversion=0.10)
SCENARIOS: dict[str, ArmModel] = {
    "aa": STABLE,
    "latency": ArmModel(latency_median_s=0.015, conversion=0.10),
    "errors": ArmModel(error_rate=0.03, conversion=0.10),
    "agreement": ArmModel(disagreement=0.10, conversion=0.10),
    "conversion": ArmModel(conversion=0.06),
}


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
                 plan: StepPlan, rate: float, seed: int) -> dict[str, Any]:
    caught_at: Counter[float] = Counter()
    by_gate: Counter[str] = Counter()
    seconds: list[float] = []
    for i in range(rollouts):
        sim = SimulatedRollout(STABLE, canary, rate_rps=rate, seed=seed * 100_003 + i)
        outcome = CanaryController(sim, sim, config, plan, clock=sim.clock,
                                   sleep=sim.sleep).run("canary")
        if outcome.decision == "rolled_back":
            caught_at[outcome.steps[-1].weight] += 1
            by_gate.update(g.gate for g in outcome.steps[-1].gates if g.verdict == "fail")
            if outcome.steps[-1].verdict == "timeout":
                by_gate["timeout"] += 1
            seconds.append(sim.now)
    k = sum(caught_at.values())
    low, high = wilson(k, rollouts)
    return {"scenario": name, "rollouts": rollouts, "rolled_back": k, "rate": k / rollouts,
            "rate_ci95": [low, high], "caught_at_step": {f"{w:g}%": c for w, c in
                                                         sorted(caught_at.items())},
            "failing_gates": dict(by_gate),
            "median_simulated_s_to_rollback": sorted(seconds)[len(seconds) // 2]
            if seconds else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=200)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--rate", type=float, default=200.0, help="simulated requests/s")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-step-samples", type=int, default=StepPlan.min_step_samples,
                        help="new canary answers before a step may pass")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    config = GateConfig(alpha=args.alpha)
    plan = StepPlan(min_step_samples=args.min_step_samples)
    print(f"method: {METHOD}; alpha={config.alpha} over the whole rollout "
          f"({config.alpha_per_gate:.4g} per gate, {len(config.gates)} gates)")
    print(f"steps {', '.join(f'{s:g}%' for s in plan.steps)}; a step passes after "
          f"{plan.min_step_samples} new canary answers with every required gate passing; "
          f"looks every {plan.poll_s:g} simulated s; {args.rate:g} requests/s; "
          f"{args.rollouts} rollouts per scenario")
    started = time.perf_counter()
    rows = []
    for name, canary in SCENARIOS.items():
        row = run_scenario(name, canary, args.rollouts, config, plan, args.rate, args.seed)
        rows.append(row)
        label = "false rollbacks" if name == "aa" else "caught"
        low, high = row["rate_ci95"]
        print(f"{name:<11} {label}: {row['rolled_back']}/{row['rollouts']} = "
              f"{row['rate']:.3f} (95% CI {low:.3f}-{high:.3f}); at step "
              f"{row['caught_at_step'] or '-'}; gates {row['failing_gates'] or '-'}; median "
              f"{row['median_simulated_s_to_rollback']} simulated s to rollback")
    aa = rows[0]
    verdict = "at or below" if aa["rate"] <= args.alpha else "ABOVE"
    print(f"A/A false-rollback rate {aa['rate']:.3f} is {verdict} the configured alpha "
          f"{args.alpha} ({time.perf_counter() - started:.1f} s wall)")
    if args.json is not None:
        args.json.write_text(json.dumps({"alpha": args.alpha, "method": METHOD,
                                         "steps": list(plan.steps), "rate_rps": args.rate,
                                         "scenarios": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
