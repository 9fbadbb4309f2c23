"""One rule for tests that need a service or tool the project installs (redis-server,
chromium, promtool): in CI it is a failure, never a skip, because `.ci/run` installs and starts
them (scripts/ensure_services.sh); on a developer's machine it is a skip that says how to
install it. CI is any non-empty CI value but "false"/"0" (.ci/run exports CI=true)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing_service(message: str) -> NoReturn:
    """Fail in CI, skip elsewhere; ``message`` says what is missing and how to install it."""
    if in_ci():
        pytest.fail(f"{message} (CI must have it: bash scripts/ensure_services.sh)")
    pytest.skip(message)
