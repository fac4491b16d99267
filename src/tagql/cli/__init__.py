"""The ``tagql`` command line: a thin shell over :mod:`tagql.api` (argument parsing and printing only).

Errors print one line (``error: ...``, or ``{"ok": false, "error": ...}`` with ``--json``) and exit with
status 2; Ctrl-C exits with 130 within a second; nothing is left half-written.
"""

from __future__ import annotations

import sys

import click
import typer

from tagql.cli import commands, knowledge, route
from tagql.cli.output import EXIT_INTERRUPTED, announce_interrupt, watch_interrupts

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Answer questions over relational databases.")
commands.register(app)
app.add_typer(knowledge.app, name="knowledge")
app.add_typer(route.app, name="route")


def main() -> None:
    """The console script: run the app, turning Ctrl-C anywhere (even during imports or a model load)
    into one line and status 130."""
    watch_interrupts()
    try:
        code = app(standalone_mode=False)
    except (KeyboardInterrupt, click.exceptions.Abort):
        announce_interrupt("--json" in sys.argv)
        sys.exit(EXIT_INTERRUPTED)
    except click.exceptions.ClickException as exc:  # usage errors: click's own message, status 2
        exc.show()
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


__all__ = ["app", "main"]
