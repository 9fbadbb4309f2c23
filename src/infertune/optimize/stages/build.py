"""Stage "build variants" of ``optimize``: the builder (search/builder.py) builds the planned
variants, by expected gain per second, until the build mark; with ``--budget auto`` the budget is
re-sized from the export's measured time."""

from __future__ import annotations

from infertune.optimize.findings import BuildArtifact
from infertune.optimize.search.builder import Builder, default_builder
from infertune.optimize.search.sizing import int8_budget_note, resize
from infertune.optimize.state import StageContext

NEED_BUILD_S = 20.0
# Marks (fractions of the whole budget) by which each stage must stop starting new work, so
# that a slow stage leaves time for the ones after it.
MARK_BUILD = 0.45


def run(ctx: StageContext, builder: Builder | None = None) -> BuildArtifact:
    """Every planned variant, built or skipped, with the build order and the baseline's id."""
    state, budget = ctx.state, ctx.budget
    if not budget.allows(NEED_BUILD_S):
        state.skip("variant building", "time budget exhausted", NEED_BUILD_S)
        return BuildArtifact()
    make = builder or default_builder
    found = make(state, max(budget.until(MARK_BUILD), NEED_BUILD_S / 2), ctx.progress)
    if state.options.budget_auto and state.log.cost_facts is not None \
            and state.log.cost_facts.export_s is not None:
        # now from the export's measured time
        resize(state, budget, state.log.cost_facts, later_share=1 - MARK_BUILD)
    for b in found.built:
        if b.skipped:
            state.skip(f"variant {b.variant_id}", b.skipped)
        elif b.is_baseline:
            found.baseline_variant_id = b.variant_id
    note = int8_budget_note(found.built, state.log.skipped, budget.spent(), MARK_BUILD)
    if note is not None:
        state.log.notes.insert(0, note)
    return found
