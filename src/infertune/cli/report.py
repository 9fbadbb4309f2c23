"""`infertune report` — not built yet (issue #7)."""

from __future__ import annotations

import typer

from infertune.errors import NotBuiltError


def register(app: typer.Typer) -> None:
    @app.command(
        "report",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        help="Not built yet (issue #7).",
    )
    def _not_built() -> None:
        raise NotBuiltError("infertune report is not built yet (issue #7)")
