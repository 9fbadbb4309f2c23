"""The OpenAPI contract against a live server: schemathesis (dev extra, pinned) runs every check
it has on every operation of /openapi.json, served by a real uvicorn port, with and without an
API key. Bounded by --max-examples so each run takes seconds."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import running

from infertune.config import ServePolicy
from infertune.serve import create_app
from infertune.serve.testing import GatedAdapter

pytestmark = [pytest.mark.slow, pytest.mark.timing_free]  # statuses and schemas, nothing timed
SCHEMATHESIS = Path(sys.executable).with_name("st")


@pytest.mark.parametrize("keyed", [False, True], ids=["no-key", "api-key"])
def test_schemathesis_finds_nothing_with_all_checks(keyed: bool) -> None:
    assert SCHEMATHESIS.exists(), "schemathesis is missing: pip install -e '.[dev]'"
    policy = ServePolicy(max_wait_ms=1, max_inputs=8, max_input_chars=200,
                         api_key_env="SERVE_TEST_KEY" if keyed else None)
    app = create_app(GatedAdapter(), policy, environ={"SERVE_TEST_KEY": "s3cret"})
    with running(app) as url:
        document = httpx.get(url + "/openapi.json", timeout=10,
                             headers={"X-API-Key": "s3cret"}).json()
        documented = {(p, m.upper()) for p, ops in document["paths"].items() for m in ops}
        served = {(r.path, m) for r in app.routes for m in r.methods if m != "HEAD"}
        assert documented == served
        command = [str(SCHEMATHESIS), "run", url + "/openapi.json", "--checks", "all",
                   "--max-examples", "20", "--seed", "1", "--workers", "1",
                   "--request-timeout", "10"]
        if keyed:
            command += ["-H", "X-API-Key: s3cret"]
        run = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    counts = re.search(r"(\d+) generated, (\d+) passed", run.stdout)
    assert counts and int(counts[1]) == int(counts[2]) > 100, run.stdout[-3000:]
