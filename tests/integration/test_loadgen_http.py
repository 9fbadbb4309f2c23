"""The load generator against real HTTP servers on 127.0.0.1 (loopback only, bounded runs)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from infertune.cli import main
from infertune.loadgen.localserver import LocalServer
from infertune.loadgen.runner import run_load
from infertune.loadgen.schedules import ScheduleSpec, build_schedule
from infertune.loadgen.targets import HttpTarget


def hold_between_2_and_3_s(t: float) -> float:
    """Every request arriving in [2 s, 3 s) after the first is answered at 3 s."""
    return 3.0 - t if 2.0 <= t < 3.0 else 0.0


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_no_coordinated_omission() -> None:
    schedule = build_schedule(ScheduleSpec(shape="constant", rate=100, duration_s=6))
    with LocalServer(delay=hold_between_2_and_3_s) as url:
        result = run_load(schedule, HttpTarget(url))
    assert result.sent == result.ok == 600
    # 100 requests fall in the stalled second, waiting 1000 ms down to ~0 ms: the top 1% of all
    # 600 (the first 6 of the stall) waited >= 940 ms. A closed-loop client would see one slow
    # request and report a p99 of a few ms.
    assert result.latency is not None and result.latency.p99 >= 800.0
    assert result.achieved_rate == pytest.approx(100.0, rel=0.02)
    stalled = result.timeline[2]
    assert stalled.p99_ms is not None and stalled.p99_ms >= 800.0
    assert result.timeline[4].p50_ms is not None and result.timeline[4].p50_ms < 100.0


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.timeout(30)
def test_unreachable_url_gives_connection_errors() -> None:
    schedule = build_schedule(ScheduleSpec(shape="constant", rate=20, duration_s=0.5))
    result = run_load(schedule, HttpTarget(f"http://127.0.0.1:{closed_port()}/", timeout_s=5))
    assert result.status_counts == {"connection_error": 10}
    assert result.ok == 0 and result.errors == 10 and result.latency is None
    assert any("failed to connect" in w for w in result.warnings)


@pytest.mark.timeout(30)
def test_cli_posts_bodies_and_reads_server_timing(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    bodies = tmp_path / "bodies.jsonl"
    bodies.write_text('{"text": "a"}\n{"text": "b"}\n')
    out = tmp_path / "r.json"
    with LocalServer() as url:
        rc = main(["loadtest", url, "--shape", "poisson", "--rate", "50", "--duration", "1s",
                   "--body-file", str(bodies), "--max-in-flight", "8", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "p50" in text and "client lag" in text
    data = json.loads(out.read_text())
    result = data["result"]
    assert result["ok"] == result["sent"] == result["schedule"]["count"] > 0
    assert set(result["server_timing_ms"]) == {"queue", "inference"}
    assert data["spec"]["shape"] == "poisson"
