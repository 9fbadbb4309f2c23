"""The infertune command line: thin. Each command lives in its own module under cli/, parses
its arguments, builds config objects and calls the library API; it never computes figures.

A command's module is named after the command (``infertune validate`` is cli/validate.py), so
a few share a name with the stage module they drive: cli/validate.py and quality/validate.py,
cli/profile.py and measure/profile.py, cli/compare.py and measure/compare.py, cli/ab.py and
rollout/ab.py. That is the one place a module name repeats on purpose: the folder says which
is the command and which is the work. Modules that are not a command (``_common.py``,
``api.py``) are named for what they hold.

Imports sit at the top of each module, the package's own and the core dependencies alike. The
few left inside a function load a heavy module that only that path needs, so that
``infertune --help`` and every other command start without it: torch, onnx and transformers
(optional extras), ray (the ``ray`` extra: ``serve --engine ray``) and redis (imported by
rollout/feedback.py, which the Redis feedback store and the release router need).
tests/unit/cli/test_cli_imports.py checks that ``import infertune.cli`` loads none of them.

Exit codes: 0 success, 1 a user error in one line, 2 usage (or a command not built yet),
3 an internal failure with a pointer to the log. ``--debug`` anywhere shows tracebacks.
"""

from __future__ import annotations

import sys
import tempfile
import traceback
from pathlib import Path

import typer
from typer._click import exceptions as click_errors  # typer vendors its own click

from infertune.cli import (  # one line per command module
    ab,
    advise,
    canary,
    compare,
    doctor,
    export,
    loadtest,
    optimize,
    profile,
    release,
    report,
    rollback,
    serve,
    shadow,
    validate,
)
from infertune.errors import InfertuneError

ERROR_LOG = Path(tempfile.gettempdir()) / "infertune-last-error.log"

app = typer.Typer(
    name="infertune",
    help="Measure where inference time goes, try the optimizations that apply, check each "
    "against your quality floor, and rank them by measured impact, effort and risk.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# The order here is the order of `infertune --help`; one line per command module.
COMMANDS = (
    doctor,
    profile,
    optimize,
    loadtest,
    report,
    compare,
    advise,
    serve,
    release,
    canary,
    shadow,
    rollback,
    ab,
    export,
    validate,
)
for command_module in COMMANDS:
    command_module.register(app)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    try:
        app(args=args, prog_name="infertune", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 1
    except click_errors.ClickException as exc:  # usage errors: bad option, missing argument
        exc.show()
        return 2
    except InfertuneError as exc:
        if debug:
            traceback.print_exc()
        message = str(exc) or type(exc).__name__
        if exc.exit_code == 3:
            _write_log()
            message += f" (details in {ERROR_LOG})"
        typer.echo(f"error: {message}", err=True)
        return exc.exit_code
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        return 130
    except Exception as exc:  # a bug: one line for the user, the traceback in the log
        if debug:
            traceback.print_exc()
        _write_log()
        typer.echo(
            f"internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            f" (traceback in {ERROR_LOG}; rerun with --debug)", err=True,
        )
        return 3
    return 0


def _write_log() -> None:
    ERROR_LOG.write_text(traceback.format_exc())


def entry() -> None:
    sys.exit(main())
