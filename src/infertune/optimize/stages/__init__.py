"""The stages of ``optimize``, one module each, in the order run.py runs them. A stage is
``run(ctx: StageContext) -> <Stage>Artifact`` (screen, candidates, inputs so far; the artifacts
are in optimize/findings.py): it reads the live run and the earlier artifacts and returns its
own, which run.py stores. The others still take the RunState, the Budget and the Progress
display and fill in their stage's artifact on the state. Each checks the budget first and, when
it cannot do its work properly, records what it skipped and what it would have needed instead
of measuring badly.

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
