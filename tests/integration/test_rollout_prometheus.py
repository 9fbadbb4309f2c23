"""The rollout against a real Prometheus (Debian's prometheus server, started by
tests/helpers/services.py) scraping `infertune serve --registry` (its own process) every
second: `infertune shadow report --prometheus` fails a shadow release whose outputs disagree,
and `infertune canary --prometheus` promotes a faithful canary reading every count by PromQL,
under open-loop traffic with no failed request."""

from __future__ import annotations

import json
import time

import httpx
import numpy as np
import pytest
from onnx_graphs import WIDTH
from release_server import release_server
from rollout_load import OpenLoop
from rollout_variants import mlp_run
from services import prometheus_server

from infertune.cli import main
from infertune.rollout.release_registry import Registry

ENV = {"PROM_KEY": "k3y"}
_RNG = np.random.default_rng(2)
BODIES = [{"inputs": _RNG.standard_normal((1, WIDTH)).round(3).tolist()} for _ in range(300)]


def _scraped_rows(prom: str, release: str) -> float:
    answer = httpx.get(prom + "/api/v1/query", params={
        "query": f'sum(infertune_shadow_rows_total{{release="{release}"}})'}).json()
    result = answer["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


@pytest.mark.slow
def test_shadow_report_and_canary_read_a_real_prometheus(tmp_path, monkeypatch,
                                                         capsys) -> None:
    reg = Registry(tmp_path / "registry")
    reg.add(mlp_run(tmp_path / "run-a"), "A")
    reg.add(mlp_run(tmp_path / "run-b", noise=1.0), "B")  # its outputs disagree
    reg.add(mlp_run(tmp_path / "run-c", noise=0.002), "C")  # a faithful rebuild
    monkeypatch.setenv("PROM_KEY", ENV["PROM_KEY"])
    with release_server(reg.root, "A", canary="C", shadow="B", api_key_env="PROM_KEY",
                        env=ENV) as url, \
            prometheus_server(tmp_path, [url.removeprefix("http://")], bearer="k3y") as prom, \
            OpenLoop(url, 30, BODIES, {"X-API-Key": "k3y"}) as load:
        deadline = time.monotonic() + 60
        while _scraped_rows(prom, "B") < 150 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _scraped_rows(prom, "B") >= 150  # Prometheus scraped the mirrored rows
        rc = main(["shadow", "report", "--server", url, "--api-key-env", "PROM_KEY",
                   "--prometheus", prom, "--json", str(tmp_path / "shadow.json")])
        shadow = json.loads((tmp_path / "shadow.json").read_text())
        assert rc == 1 and shadow["verdict"] == "fail"
        agreement = next(g for g in shadow["gates"] if g["gate"] == "agreement")
        assert agreement["verdict"] == "fail" and agreement["interval"][0] > 0.05
        assert "fails its gates" in capsys.readouterr().err

        rc = main(["canary", "--server", url, "--release", "C", "--api-key-env", "PROM_KEY",
                   "--prometheus", prom, "--steps", "50,100", "--min-step-samples", "60",
                   "--baseline-samples", "60", "--step-timeout-s", "120",
                   "--json", str(tmp_path / "c.json")])
        outcome = json.loads((tmp_path / "c.json").read_text())
        assert rc == 0 and outcome["decision"] == "promoted", outcome["reason"]
        assert [s["weight"] for s in outcome["steps"]] == [50.0, 100.0]
        # counts came from PromQL: each step saw its 60 canary answers there
        assert all(s["canary_answers"] >= 60 for s in outcome["steps"])
    assert [a for a in load.answers if a.status != 200] == []
