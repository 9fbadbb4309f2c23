"""``optimize(...)``: the run's stages in order. A stage converted to the artifact contract
is ``run(ctx) -> <Stage>Artifact`` (findings.py): it reads the live run and the earlier stages'
artifacts through its StageContext (state.py) and returns its own, which this module stores;
the others still take (RunState, Budget, Progress) and fill in their stage's artifact on the
state. At the end the RunRecord (record.py), the stages' artifacts, is saved as run.json.
The report is built afterwards from those files by report/run_report.py; this package knows
nothing of report/.

Stages (each one checks the budget before it starts; see search/budget.py), one module each
in stages/ (its __init__ lists them):
    setup -> [size budget, with --budget auto] -> profile baseline -> reference outputs ->
    build variants (by expected gain per second) -> screen (quick timing, stopping early for
    a clear loser, + quality) -> confirm survivors (interleaved) -> serving sweep + validation
    -> candidates / cascade -> input options
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from infertune.optimize.record import RunRecord
from infertune.optimize.search import sizing
from infertune.optimize.search.budget import Budget, NullProgress, Progress
from infertune.optimize.search.builder import Builder
from infertune.optimize.search.costs import BudgetChoice, budget_estimate
from infertune.optimize.stages import (
    build,
    candidates,
    inputs,
    profile,
    screen,
    setup,
    survivors,
    sweep,
)
from infertune.optimize.stages.confirm_served import decisive_reserve_s
from infertune.optimize.state import (
    DEFAULT_BUDGET_S,
    QUICK_BUDGET_S,
    OptimizeOptions,
    RunPaths,
    RunState,
    StageContext,
)

__all__ = ["DEFAULT_BUDGET_S", "QUICK_BUDGET_S", "OptimizeOptions", "RunPaths", "RunState",
           "optimize"]

Step = Callable[[StageContext], None]


def _legacy(step: Callable[[RunState, Budget, Progress], None]) -> Step:
    """A stage that still fills in its artifact on the state (not yet ``run(ctx)``)."""
    return lambda ctx: step(ctx.state, ctx.budget, ctx.progress)


def optimize(options: OptimizeOptions, *, progress: Progress | None = None,
             builder: Builder | None = None,
             clock: Callable[[], float] = time.monotonic,
             on_budget: Callable[[BudgetChoice], None] | None = None) -> RunState:
    """Run every stage into ``options.out`` and return what the run measured and decided.
    ``on_budget`` hears what ``--budget auto`` chose each time it sizes the budget."""
    progress = progress or NullProgress()
    paths = RunPaths(Path(options.out))
    progress.tick(f"loading {options.model}")
    # a bad reference or a floor that does not fit the model fails before the run dir exists
    state = RunState(options=options, paths=paths, baseline=setup.load_baseline(options))
    setup.check_floor(state)
    paths.create()
    budget = Budget(options.budget_s, clock=clock)
    reserve = partial(decisive_reserve_s, options.scenario, quick=options.quick)
    budget.reserved_s = reserve(budget.total_s)

    ctx = StageContext(state, budget, progress)

    def build_variants(s: RunState, b: Budget, p: Progress) -> None:
        build.build(s, b, p, builder)

    # the stages that return their artifact: each one's is stored here, nowhere else
    def screen_variants(c: StageContext) -> None:
        state.screen = screen.run(c)

    def candidate_models(c: StageContext) -> None:
        state.models = candidates.run(c)

    def input_options(c: StageContext) -> None:
        state.inputs = inputs.run(c)

    order: Sequence[tuple[str, Step]] = [
        ("setup", _legacy(setup.setup)),
        ("size budget", _legacy(sizing.size_budget)),
        ("profile baseline", _legacy(profile.profile_baseline)),
        ("reference outputs", _legacy(profile.reference_outputs)),
        ("build variants", _legacy(build_variants)),
        ("screen variants", screen_variants),
        ("confirm survivors", _legacy(survivors.confirm)),
        ("serving policy", _legacy(sweep.serving)),
        ("candidate models", candidate_models),
        ("input options", input_options),
    ]
    for name, step in order:
        if name == "size budget" and not options.budget_auto:
            continue
        progress.stage(name, f"{budget.left():.0f} s left")
        started = clock()
        choice = state.log.budget_choice
        step(ctx)
        if name == "size budget":  # a resized budget may now hold the decisive runs, or not
            budget.reserved_s = reserve(budget.total_s)
        state.log.stage_seconds[name] = clock() - started
        if on_budget is not None and state.log.budget_choice is not choice \
                and state.log.budget_choice is not None:
            on_budget(state.log.budget_choice)
    log = state.log
    log.budget_estimate = budget_estimate(
        log.stage_seconds, [s.need_s for s in log.skipped if s.need_s], log.cost_facts)
    RunRecord.from_state(state).save(paths)  # run.json etc.: what the report is built from
    return state
