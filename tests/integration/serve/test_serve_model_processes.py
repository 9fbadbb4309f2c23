"""Model worker processes (serve/model_processes.py) in a real `infertune serve`: an eager torch
model runs in child processes by default (worker_kind auto), answers as the threads do, keeps
a poisoned input's failure to its own request, and survives a child being killed."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
from serve_fault_procs import ServeProcess, wait_until  # tests/helpers


def _children(pid: int) -> list[int]:
    """The live model worker processes of server ``pid`` (Linux /proc)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            if b"spawn_main" in cmdline:  # not the resource tracker
                found.append(int(child))
    return found


def _predict(url: str, rows: list[list[float]]) -> httpx.Response:
    return httpx.post(url + "/v1/predict", json={"inputs": rows}, timeout=30)


def test_torch_model_runs_in_worker_processes_and_survives_a_killed_one(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path, service_ms=5, policy={"workers": 2})
    with server.running():
        assert server.proc is not None
        config = httpx.get(server.url + "/v1/config", timeout=5).json()
        assert config["worker_kind"] == "process"
        assert config["policy"]["worker_kind"] == "auto"
        children = _children(server.proc.pid)
        assert len(children) == 2

        answer = _predict(server.url, [[1, 2, 3, 4], [0.5, 0, 0, 0]])
        assert answer.status_code == 200
        assert answer.json()["outputs"] == [[2, 4, 6, 8], [1, 0, 0, 0]]

        # a poisoned row fails its own request (422, the model raised on its inputs) only
        poisoned = _predict(server.url, [[-1, 0, 0, 0]])
        assert poisoned.status_code == 422, poisoned.text
        assert "ValueError" in poisoned.text
        assert _predict(server.url, [[3, 0, 0, 0]]).json()["outputs"] == [[6, 0, 0, 0]]

        os.kill(children[0], signal.SIGKILL)
        answers = [_predict(server.url, [[float(i), 0, 0, 0]]) for i in range(20)]
        died = [a for a in answers if a.status_code == 500]
        # the dead child fails the one batch it was handed, as a server fault (500, retry), not
        # as the inputs' fault (422); while its replacement loads (CPU the other worker shares
        # on a small machine) the server may shed by deadline (503), never answer wrongly
        assert len(died) <= 1 and all("worker process died" in a.text for a in died)
        assert {a.status_code for a in answers} <= {200, 500, 503}
        assert all(a.json()["outputs"] == [[2.0 * i, 0, 0, 0]]
                   for i, a in enumerate(answers) if a.status_code == 200)
        wait_until(lambda: len(_children(server.proc.pid)) == 2, 120, interval=0.5)
        assert children[0] not in _children(server.proc.pid)
        # the replacement loads the model (seconds, on a core the survivor shares), then serves
        wait_until(lambda: _predict(server.url, [[7, 7, 7, 7]]).status_code == 200, 120,
                   interval=0.5)
        after = [_predict(server.url, [[1, 1, 1, float(i)]]) for i in range(6)]
        assert [a.status_code for a in after] == [200] * 6, [a.text for a in after]
    log = server.log.read_text()
    assert "workers=2 (processes)" in log and "died" in log


def test_worker_kind_thread_keeps_batches_in_the_server_process(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path, service_ms=5, policy={"workers": 2, "worker_kind": "thread"})
    with server.running():
        assert server.proc is not None
        assert httpx.get(server.url + "/v1/config", timeout=5).json()["worker_kind"] == "thread"
        assert _children(server.proc.pid) == []
        assert _predict(server.url, [[1, 2, 3, 4]]).json()["outputs"] == [[2, 4, 6, 8]]
    assert "workers=2 (threads)" in server.log.read_text()
