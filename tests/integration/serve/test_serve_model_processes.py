"""Model worker processes (serve/model_processes.py) in a real `infertune serve`: an eager torch
model runs in child processes by default (worker_kind auto), answers as the threads do, keeps
a poisoned input's failure to its own request, and survives a child being killed."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from prom_counters import change, counters
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


def _both_busy_then_kill(url: str, victim: int) -> list[httpx.Response]:
    """Two stalling requests (first value 9: 3 s in the model), 0.3 s apart so each is a
    batch of its own on its own worker; ``victim`` is killed while both are held."""
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(_predict, url, [[9, 0, 0, 0]])
        time.sleep(0.3)
        second = pool.submit(_predict, url, [[9, 1, 0, 0]])
        time.sleep(0.7)
        os.kill(victim, signal.SIGKILL)
        return [first.result(), second.result()]


def test_torch_model_runs_in_worker_processes_and_survives_a_killed_one(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path, service_ms=5, policy={"workers": 2, "cache_size": 0,
                                                          "timeout_ms": 10_000})
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

        # both children hold a batch (a 3 s stall each, within the 10 s deadline; sent apart
        # so they are two batches)
        # when one is killed: exactly its batch fails, as a server fault (500, retry), not as
        # the inputs' fault (422), and the other answers
        before = counters(server.url)
        held = _both_busy_then_kill(server.url, children[0])
        assert sorted(a.status_code for a in held) == [200, 500], [a.text for a in held]
        died = next(a for a in held if a.status_code == 500)
        assert "worker process died" in died.json()["error"]
        assert next(a for a in held if a.status_code == 200).json()["outputs"][0][0] == 18.0
        # while the replacement loads, the survivor serves; what it cannot take is shed (503,
        # counted by reason), never answered wrongly
        answers = [_predict(server.url, [[float(i), 0, 0, 0]]) for i in range(20)]
        ok = [i for i, a in enumerate(answers) if a.status_code == 200]
        shed = [a for a in answers if a.status_code == 503]
        assert len(ok) + len(shed) == 20, [(a.status_code, a.text) for a in answers
                                           if a.status_code != 200]
        assert len(ok) >= 10, [a.text for a in answers]  # the survivor is idle: it serves
        assert all(answers[i].json()["outputs"] == [[2.0 * i, 0, 0, 0]] for i in ok)
        moved = change(before, counters(server.url))
        assert moved.pop('infertune_errors_total{type="batch_WorkerDied"}') == 1
        assert moved.pop('infertune_requests_total{status="500"}') == 1
        assert moved.pop('infertune_requests_total{status="200"}') == 1 + len(ok)
        assert moved.pop('infertune_requests_total{status="503"}', 0) == len(shed)
        assert sum(moved.pop(k) for k in list(moved) if k.startswith("infertune_shed_total")) \
            == len(shed)
        assert moved == {}, moved
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
