"""`infertune compare` — not built yet (issue #3)."""

from __future__ import annotations

import typer

from infertune.errors import NotBuiltError


def register(app: typer.Typer) -> None:
    @app.command(
        "compare",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        help="Not built yet (issue #3).",
    )
    def _not_built() -> None:
        raise NotBuiltError("infertune compare is not built yet (issue #3)")
