"""``optimize(...)``: the run's stages in order. A stage is ``run(ctx) -> <Stage>Artifact``
(findings.py): it reads the live run and the earlier stages' artifacts through its StageContext
(state.py) and returns its own, which this module stores on the RunState; every stage adds its
notes, skips and cost facts to the run's log. At the end the RunRecord (record.py), the stages'
artifacts, is saved as run.json. The report is built afterwards from those files by
report/run_report.py; this package knows nothing of report/.

Stages (each one checks the budget before it starts; see search/budget.py), one module each
in stages/ (its __init__ lists them), with the artifact each returns:
    setup (profiling: the machine) -> [size budget, with --budget auto] -> profile baseline
    (profiling: + the profile) -> reference outputs -> build variants (build, by expected gain
    per second) -> screen (screen: quick timing, stopping early for a clear loser, + quality)
    -> confirm survivors (screen, refined: interleaved) -> serving sweep + validation +
    confirmation as served (sweep and confirm) -> candidates / cascade (models) -> input
    options (inputs)
"size budget" and "reference outputs" return none: they fill in the budget and the live run
(reference outputs, baseline timings), not findings.
"""

from __future__ import annotations

import time
from collections.abc import Callable
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


def stages(builder: Builder | None = None) -> list[tuple[str, Step]]:
    """The stages in order, by name; each step stores the artifact its stage returns on the
    run's state (and nowhere else)."""

    def setup_run(c: StageContext) -> None:
        c.state.profiling = setup.run(c)

    def size_budget(c: StageContext) -> None:
        # no artifact: it resizes the budget, and the log keeps the choice and why
        sizing.size_budget(c.state, c.budget, c.progress)

    def profile_baseline(c: StageContext) -> None:
        c.state.profiling = profile.run(c)  # setup's, with the profile

    def build_variants(c: StageContext) -> None:
        c.state.build = build.run(c, builder)

    def screen_variants(c: StageContext) -> None:
        c.state.screen = screen.run(c)

    def confirm_survivors(c: StageContext) -> None:
        c.state.screen = survivors.run(c)  # the screen's candidates, refined

    def serving_policy(c: StageContext) -> None:
        found = sweep.run(c)
        c.state.sweep, c.state.confirm = found.sweep, found.confirm

    def candidate_models(c: StageContext) -> None:
        c.state.models = candidates.run(c)

    def input_options(c: StageContext) -> None:
        c.state.inputs = inputs.run(c)

    return [
        ("setup", setup_run),
        ("size budget", size_budget),
        ("profile baseline", profile_baseline),
        ("reference outputs", profile.reference_outputs),  # live handles only: no artifact
        ("build variants", build_variants),
        ("screen variants", screen_variants),
        ("confirm survivors", confirm_survivors),
        ("serving policy", serving_policy),
        ("candidate models", candidate_models),
        ("input options", input_options),
    ]


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
    for name, step in stages(builder):
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
