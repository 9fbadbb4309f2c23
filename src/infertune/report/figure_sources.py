"""Where a run's measured figures were measured: the artifact, relative to the run folder, that
holds each figure's observations, as the optimize stage that measured it writes it. A figure
labelled measured names one of these (report/provenance.py checks that it names one at all),
so a reader can open the file and find the samples behind the number.

    profile.json                      the baseline profile (stage times, e2e percentiles)
    variants/<folder>/latency.json    a variant's quick and proper interleaved A/B timings
    variants/<folder>/quality.json    a variant's held-out quality against the baseline
    extras.json                       --candidate models: their timings, quality and cascades
    serving.json                      the serving sweep and its in-process load tests
    confirm/confirmation.json         the finalists confirmed as served (own process, HTTP)
    run.json                          what has no file of its own (input trimming/bucketing)

The names built from RunPaths (artifacts/, the run folder's one list of file names) are
the ones optimize writes through; the others are spelled where optimize writes
them (optimize/stages/: screen.py's judge and screen, survivors.py, confirm_served.py), and
tests/unit/report/test_provenance_artifacts.py checks that those writers still use them.
"""

from __future__ import annotations

from pathlib import Path

from infertune.artifacts import RunPaths
from infertune.optimize.record import RunRecord

_RELATIVE = RunPaths(Path())
PROFILE = _RELATIVE.profile.as_posix()
SERVING = _RELATIVE.serving.as_posix()
EXTRAS = _RELATIVE.extras.as_posix()
RUN_JSON = _RELATIVE.run_json.as_posix()
CONFIRMATION = "confirm/confirmation.json"  # optimize/stages/confirm_served.py writes it
LATENCY_FILE = "latency.json"  # in a variant's folder: optimize/stages/screen.py, survivors.py
QUALITY_FILE = "quality.json"  # in a variant's folder: optimize/stages/screen.py judge()

FIXED = frozenset({PROFILE, SERVING, EXTRAS, RUN_JSON, CONFIRMATION})


def _variant_file(run: RunRecord, variant_id: str, name: str) -> str:
    """``name`` in the variant's own folder when it was built into one; a --candidate model's
    figures are in extras.json; anything else only in run.json."""
    built = run.build.built_variant(variant_id)
    if built is not None and built.path is not None:
        return (_RELATIVE.variant(Path(built.path).name) / name).as_posix()
    if any(c.variant_id == variant_id for c in run.models.candidate_models):
        return EXTRAS
    return RUN_JSON


def timing_artifact(run: RunRecord, variant_id: str) -> str:
    """Where the interleaved A/B of ``variant_id`` against the baseline was saved."""
    return _variant_file(run, variant_id, LATENCY_FILE)


def quality_artifact(run: RunRecord, variant_id: str) -> str:
    """Where the held-out quality of ``variant_id`` was saved."""
    return _variant_file(run, variant_id, QUALITY_FILE)


def is_run_artifact(name: str) -> bool:
    """Whether ``name`` is one of the files an optimize run writes its measurements to."""
    parts = name.split("/")
    if name in FIXED:
        return True
    return (len(parts) == 3 and parts[0] == _RELATIVE.variants.as_posix() and bool(parts[1])
            and parts[2] in (LATENCY_FILE, QUALITY_FILE))
