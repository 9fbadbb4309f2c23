"""The loadtest-stream and loadtest-sweep results files as Artifacts: the JSON they write is the
object the hand-built dicts wrote (schema id included), and it reads back."""

from __future__ import annotations

import json
from pathlib import Path

from test_loadgen_round_trip import RECORD, SPEC, STREAMING, SWEEP, comparable

from infertune.loadgen.stream_files import StreamRunFile, StreamSweepFile
from infertune.loadgen.streaming_result import per_request
from infertune.loadgen.workloads import PrefixReuse

REUSE = PrefixReuse(requests=10, prompt_chars=1000, reused_chars=250, share=0.25,
                    requests_reusing=3)


def test_a_run_file_writes_what_the_hand_built_dict_wrote(tmp_path: Path) -> None:
    made = StreamRunFile(SPEC, STREAMING, [per_request(RECORD)], REUSE)
    path = made.save(tmp_path / "run.json")
    # what cli/loadtest_stream.py's _once built by hand before
    old = {"schema": "infertune.loadtest-stream/v1", "spec": SPEC.to_dict(),
           "result": STREAMING.to_dict(), "requests": [per_request(RECORD)],
           "prefix_reuse": REUSE.model_dump()}
    assert json.loads(path.read_text()) == json.loads(json.dumps(old))
    assert comparable(StreamRunFile.load(path)) == comparable(made)


def test_a_sweep_file_writes_what_the_hand_built_dict_wrote(tmp_path: Path) -> None:
    made = StreamSweepFile(SPEC, SWEEP)
    path = made.save(tmp_path / "sweep.json")
    old = {"schema": "infertune.loadtest-sweep/v1", "spec": SPEC.to_dict(),
           "sweep": SWEEP.to_dict()}
    assert json.loads(path.read_text()) == json.loads(json.dumps(old))
    assert comparable(StreamSweepFile.load(path)) == comparable(made)
