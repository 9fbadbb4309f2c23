"""`infertune doctor` — not built yet (issue #2)."""

from __future__ import annotations

import typer

from infertune.errors import NotBuiltError


def register(app: typer.Typer) -> None:
    @app.command(
        "doctor",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        help="Not built yet (issue #2).",
    )
    def _not_built() -> None:
        raise NotBuiltError("infertune doctor is not built yet (issue #2)")
