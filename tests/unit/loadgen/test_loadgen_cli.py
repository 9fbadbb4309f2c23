"""`infertune loadtest`: schedule-only statistics, bad input (exit 1, one line), and an
in-process run of a tiny TorchScript model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from infertune.cli import main
from infertune.cli.loadtest import latency_strip
from infertune.loadgen.result import TimelinePoint


def test_schedule_only_prints_statistics(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "s.json"
    rc = main(["loadtest", "--shape", "constant", "--rate", "20", "--duration", "2m",
               "--schedule-only", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "2400 requests over 120 s" in text and "20.00 req/s" in text
    data = json.loads(out.read_text())
    assert data["stats"]["count"] == 2400 and data["stats"]["peak_1s_rate"] == 20


@pytest.mark.parametrize("args,expected", [
    (["--shape", "zigzag"], "unknown traffic shape 'zigzag'"),
    (["--rate", "0"], "rate must be > 0"),
    (["--rate", "-5"], "rate must be > 0"),
    (["--duration", "soon"], "--duration 'soon' is not a duration; write it like 500ms"),
    (["--shape", "gamma", "--burstiness", "0"], "burstiness must be > 0"),
    (["--spin-ms", "-1"], "must be >= 0 ms, got -1 ms; pass --spin-ms 0"),
    (["--spin-ms", "nan"], "must be >= 0 ms, got nan ms; pass --spin-ms 0"),
])
def test_bad_input_is_one_line_exit_1(args: list[str], expected: str,
                                      capsys: pytest.CaptureFixture) -> None:
    rc = main(["loadtest", "--schedule-only", *args])
    err = capsys.readouterr().err
    assert rc == 1
    assert expected in err and err.count("\n") == 1


def test_non_monotonic_trace_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0}\n{"timestamp": 2}\n{"timestamp": 1}\n')
    rc = main(["loadtest", "--shape", "trace", "--trace", str(trace), "--schedule-only"])
    err = capsys.readouterr().err
    assert rc == 1 and "timestamps go backwards" in err and err.count("\n") == 1


def test_target_required_unless_schedule_only(capsys: pytest.CaptureFixture) -> None:
    assert main(["loadtest", "--rate", "5", "--duration", "1s"]) == 1
    assert "needs a TARGET" in capsys.readouterr().err


def test_in_process_model(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    import torch
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    path = tmp_path / "tiny.pt"
    torch.jit.trace(module.eval(), torch.zeros(1, 16)).save(str(path))
    np.save(tmp_path / "tiny.example.npy", np.zeros(16, dtype=np.float32))
    out = tmp_path / "r.json"
    rc = main(["loadtest", str(path), "--shape", "constant", "--rate", "40", "--duration",
               "1s", "--max-batch-size", "4", "--max-wait-ms", "5", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "p99.9" in text and "statuses 200: " in text
    result = json.loads(out.read_text())["result"]
    # serve's runtime answers every request; on a busy test machine its default overload
    # deadline may shed one, which is serving as designed, not a failure of the load test
    assert result["sent"] == 40 and result["ok"] + result["sheds"] == 40 and result["ok"] >= 36
    assert result["errors"] == 0
    assert set(result["server_timing_ms"]) == {"queue", "preprocess", "inference", "postprocess"}


def test_bad_policy_for_in_process(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc = main(["loadtest", "no-such-model-dir", "--duration", "1s", "--max-batch-size", "0"])
    assert rc == 1 and "--max-batch-size" in capsys.readouterr().err


def test_latency_strip_scales_to_worst_second() -> None:
    points = [TimelinePoint(0, 5, 1.0, 10.0), TimelinePoint(1, 0, None, None),
              TimelinePoint(2, 5, 1.0, 80.0)]
    strip = latency_strip(points).splitlines()[1].strip()
    assert strip == "▂·█"


@pytest.mark.parametrize("args,scv", [
    (["--shape", "poisson", "--rate", "200"], 1.0),
    (["--shape", "gamma", "--rate", "400", "--burstiness", "0.25"], 4.0),
])
def test_schedule_only_burstiness(args: list[str], scv: float, tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    assert main(["loadtest", *args, "--duration", "100s", "--schedule-only", "--seed", "4",
                 "--json", str(out)]) == 0
    stats = json.loads(out.read_text())["stats"]
    # 5 delta-method standard errors of the sample SCV of gamma(k = 1/scv) gaps (the
    # derivation is in test_loadgen_schedules.py)
    k, n = 1 / scv, stats["count"] - 1
    m2, m3, m4 = 1 / k, 2 / k**2, 3 / k**2 + 6 / k**3
    se = ((m4 - m2**2 + 4 * m2**2 * m2 - 4 * m2 * m3) / n) ** 0.5
    assert abs(stats["gap_scv"] - scv) < 5 * se
