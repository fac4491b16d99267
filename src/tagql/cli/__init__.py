"""The ``tagql`` command line: a thin shell over :mod:`tagql.api` (argument parsing and printing only).

Errors print one line (``error: ...``, or ``{"ok": false, "error": ...}`` with ``--json``) and exit with
status 2; Ctrl-C exits with 130 within a second, even while tagql is still loading; nothing is left
half-written.
"""

from __future__ import annotations

import sys
from typing import Any

from tagql.cli.interrupts import EXIT_INTERRUPTED, announce_interrupt, watch_interrupts


def main() -> None:
    """The console script: watch for Ctrl-C first, then load and run the app."""
    watch_interrupts()
    try:
        import click

        from tagql.cli.application import app

        usage_errors: tuple[type[BaseException], ...] = (click.exceptions.ClickException,)
        try:  # typer >= 0.20 raises its own vendored copy of click's exceptions
            from typer._click.exceptions import ClickException as TyperClickException

            usage_errors += (TyperClickException,)
        except ImportError:
            pass
        try:
            code = app(standalone_mode=False)
        except usage_errors as exc:  # usage errors: click's own message, status 2
            exc.show()
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            raise KeyboardInterrupt from None
    except KeyboardInterrupt:
        announce_interrupt("--json" in sys.argv)
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(code if isinstance(code, int) else 0)


def __getattr__(name: str) -> Any:
    if name == "app":  # loaded on use, so that ``main`` can watch for Ctrl-C before the heavy imports
        from tagql.cli.application import app

        return app
    raise AttributeError(name)


__all__ = ["app", "main"]
