"""The stages of ``optimize``, one module each, in the order run.py runs them. A stage is
``run(ctx: StageContext) -> <Stage>Artifact`` (the artifacts are in optimize/findings.py): it
reads the live run and the earlier artifacts and returns its own, which run.py stores; setup's
ProfileArtifact is completed by profile baseline, and confirm survivors refines the screen's.
Serving policy returns two (``sweep.ServingArtifacts``: the sweep and the confirmation as
served). Reference outputs (profile.py) is ``reference_outputs(ctx) -> None``: it fills in only
live handles (the baseline's outputs and timings) and the log. Each checks the budget first
and, when it cannot do its work properly, records what it skipped and what it would have needed
instead of measuring badly.

    setup.py       setup: hardware, scenario, quality floor, the quality subset, call costs
    (search/sizing.py: size budget, with --budget auto)
    profile.py     profile baseline; reference outputs (and the baseline's screening samples)
    build.py       build variants (search/builder.py), by expected gain per second
    screen.py      screen variants: quick timing, stopping early for a clear loser, + quality
    survivors.py   confirm survivors: interleaved against the baseline, in processes of their own
    sweep.py       serving policy: the policy sweep on the finalists, in-process load tests
    confirm_served.py  (within serving policy) the finalists confirmed as served, over HTTP
    candidates.py  candidate models, and their cascades
    inputs.py      input options: response cache, input trimming, length bucketing
"""
