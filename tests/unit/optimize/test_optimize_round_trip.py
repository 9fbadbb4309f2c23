"""Every optimize artifact round-trips through JSON, and writes exactly what the hand-written
to_dict wrote before the one serialisation (Serial) replaced it: round_trip_old_dicts.json was
captured by running that code on these samples (round_trip_samples.py, root /runs/r), so
run.json, serving.json and extras.json files written then still load and new ones read the
same, key for key and in the same order (run.json's v2 holds v1's keys under each finding's
stage: the values are compared through v1_to_v2). One edit to the capture since: a variant's
manifest is the typed Manifest, so BuiltVariant's sample manifest is a whole Manifest's dict (as
a run's builder always wrote it, not the sample's two hand-made keys), and a variant that did not
build writes null where the old code wrote {} (BuiltVariant.from_dict still reads {})."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from round_trip_samples import samples

from infertune.optimize.findings import RunFindings, v1_to_v2

ROOT = Path("/runs/r")
OLD: dict[str, Any] = json.loads((Path(__file__).parent / "round_trip_old_dicts.json")
                                 .read_text())
SAMPLES = samples(ROOT)
WRITE_ONLY = {"EngineVerdict"}  # doctor prints it; nothing reads it back


def written(sample: Any) -> Any:
    return sample.to_dict()


def read(cls: Any, data: Any) -> Any:
    return cls.from_dict(data)


def test_every_sample_was_captured() -> None:
    assert set(OLD) == set(SAMPLES)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_writes_what_the_hand_written_to_dict_wrote(name: str) -> None:
    data = json.loads(json.dumps(written(SAMPLES[name])))
    old = OLD[name]
    if name.startswith("RunRecord"):  # run.json v1 was flat; v2 holds each finding under its
        old, data = v1_to_v2(old), _stage_keys_of(v1_to_v2(old), data)  # stage's name
        old["schema"] = data["schema"]
    # every key the hand-written code wrote, with its value; a field added since adds only
    # its own key (so a new measured field stays one edit in its class)
    assert {k: v for k, v in data.items() if k in old} == old
    if name.startswith("RunRecord"):
        return  # v2's stages come in the order of RunFindings, not of v1's flat keys
    # the same keys in the same order (a nested class from another package, ServiceCurve,
    # keeps its own order: its own tests hold it)
    assert [k for k in data if k in old] == list(old)


def _stage_keys_of(old: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each stage's artifact cut to the keys v1 had (fields added since go)."""
    stages = {f.name for f in dataclasses.fields(RunFindings)}
    return {k: {kk: vv for kk, vv in v.items() if kk in old.get(k, {})} if k in stages else v
            for k, v in data.items()}


@pytest.mark.parametrize("name", sorted(set(SAMPLES) - WRITE_ONLY))
def test_reads_back_what_it_wrote(name: str) -> None:
    sample = SAMPLES[name]
    again = read(type(sample), json.loads(json.dumps(written(sample))))
    assert again == sample


@pytest.mark.parametrize("name", sorted(set(SAMPLES) - WRITE_ONLY))
def test_reads_the_captured_old_dict(name: str) -> None:
    sample = SAMPLES[name]
    assert read(type(sample), OLD[name]) == sample
