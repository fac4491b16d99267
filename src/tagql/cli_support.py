"""What every ``tagql`` command group shares: the consoles and one-line error handling (exit 2)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer
from rich.console import Console

from tagql.errors import TagqlError

console = Console()
err_console = Console(stderr=True)


def fail(exc: BaseException) -> None:
    """Print ``error: <one line>`` on stderr and exit with status 2."""
    msg = exc.one_line() if isinstance(exc, TagqlError) else f"{exc.__class__.__name__}: {exc}"
    err_console.print(f"[bold red]error:[/] {msg}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn tagql errors (and Ctrl-C) into a one-line message and exit status 2 / 130."""
    try:
        yield
    except TagqlError as exc:
        fail(exc)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        raise typer.Exit(130) from None
