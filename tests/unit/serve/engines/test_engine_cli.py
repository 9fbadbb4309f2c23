"""`infertune serve --engine/--ray-address/--min-replicas`: wrong combinations are one-line
errors before anything is loaded or started."""

from __future__ import annotations

import pytest

from infertune.cli import main


@pytest.mark.parametrize(("args", "message"), [
    (["--engine", "gpu"], "error: --engine must be local or ray, got 'gpu'"),
    (["--ray-address", "auto"], "error: --ray-address needs --engine ray"),
    (["--min-replicas", "2"], "error: --min-replicas needs --engine ray"),
])
def test_engine_flags_are_checked_first(args: list[str], message: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "minilm", "--port", "0", *args]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and "\n" not in err
