"""What every ``tagql`` command shares: the consoles, one-line errors (plain or ``--json``), Ctrl-C,
progress bars, and printing results. Values from databases are printed as text, never as rich markup."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from typer.core import TyperOption

from tagql.cli.interrupts import EXIT_INTERRUPTED, announce_interrupt
from tagql.errors import TagqlError
from tagql.models import RouteCandidate

console = Console()
err_console = Console(stderr=True)

EXIT_ERROR = 2

# typer 0.29 shows every flag as "--json <bool>", as if it took a value: flags show no type
_display_type = TyperOption.display_type_rich
TyperOption.display_type_rich = lambda self, ctx: None if self.is_flag else _display_type(self, ctx)  # type: ignore[method-assign]


def emit_json(obj: Any) -> None:
    """One JSON object on one line of stdout."""
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


def message_of(exc: BaseException) -> str:
    return exc.one_line() if isinstance(exc, TagqlError) else f"{exc.__class__.__name__}: {exc}"


def fail(exc: BaseException, as_json: bool = False) -> None:
    """``error: <one line>`` on stderr (or ``{"ok": false, "error": ...}`` on stdout), exit status 2."""
    msg = message_of(exc)
    if as_json:
        emit_json({"ok": False, "error": msg})
    else:
        err_console.print(Text.assemble(("error: ", "bold red"), msg), soft_wrap=True)
    raise typer.Exit(EXIT_ERROR)


@contextmanager
def user_errors(as_json: bool = False) -> Iterator[None]:
    """Turn tagql errors into one line and exit status 2, and Ctrl-C into "interrupted" and 130."""
    try:
        yield
    except TagqlError as exc:
        fail(exc, as_json)
    except KeyboardInterrupt:
        announce_interrupt(as_json)
        raise typer.Exit(EXIT_INTERRUPTED) from None


def download_progress(label: str, quiet: bool = False) -> tuple[Callable[[int, int], None], Callable[[], None]]:
    """A byte progress bar on stderr for a long first-use step, shown only once there is work."""
    progress = Progress(TextColumn(label), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                        console=err_console, transient=True, disable=quiet)
    return _callback(progress)


def count_progress(label: str, quiet: bool = False) -> tuple[Callable[[int, int], None], Callable[[], None]]:
    """An item-count progress bar on stderr (statements checked, questions routed...)."""
    progress = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), console=err_console, transient=True,
                        disable=quiet)
    return _callback(progress)


class StageProgress:
    """A progress callback ``(stage, done, total)`` for long first-use steps named by their reason
    (distilling the static token embeddings): one bar per stage on stderr, started on the first report and
    finished when ``done`` reaches ``total``, so a command that runs no such step prints nothing."""

    def __init__(self, console: Console | None = None, quiet: bool = False) -> None:
        self.console = console or err_console
        self.quiet = quiet
        self._bar: Progress | None = None
        self._tasks: dict[str, Any] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        if self.quiet:
            return
        if self._bar is None:
            self._bar = Progress(BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=self.console)
            self._bar.start()
            self._tasks = {}
            import atexit

            atexit.register(self.close)  # Ctrl-C or an error mid-step: the terminal gets its cursor back
        if stage not in self._tasks:
            self.console.print(Text(stage + ":"))  # the reason, whole, on its own line above its bar
            self._tasks[stage] = self._bar.add_task("", total=total)
        self._bar.update(self._tasks[stage], completed=done, total=total)
        if done >= total and all(t.finished for t in self._bar.tasks):
            self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _callback(progress: Progress) -> tuple[Callable[[int, int], None], Callable[[], None]]:
    state: dict[str, Any] = {}

    def update(done: int, total: int) -> None:
        if "task" not in state:
            progress.start()
            state["task"] = progress.add_task("work", total=total)
        progress.update(state["task"], total=total, completed=done)

    return update, progress.stop


def cell(value: Any) -> str:
    return "NULL" if value is None else str(value)


def rows_table(columns: list[str], rows: list[list[Any]], limit: int) -> Table:
    """Result rows as a table; cells are plain text (a value holding ``[red]`` prints as written)."""
    table = Table(show_header=True, header_style="bold")
    for c in columns:
        table.add_column(Text(str(c)))
    for row in rows[:limit]:
        table.add_row(*[Text(cell(v)) for v in row])
    return table


def print_answer(a: Any) -> None:
    """An :class:`~tagql.models.Answer` for a person: SQL, plan, statements, rows, notes, answer, cost."""
    console.rule(Text(a.question, style="bold"))
    if a.routing:
        best = a.routing[0]
        console.print(Text(f"routed to {a.database} ({', '.join(best.tables)})", style="dim"))
    if a.sql:
        console.print(Syntax(a.sql, "sql", word_wrap=True))
    if a.plan is not None and a.plan.operators:
        console.print("[bold]LM operators run on the result:[/]")
        for op in a.plan.operators:
            console.print(Text(f"  {json.dumps(op, default=str)}"))
    for att in a.attempts[:-1]:
        console.print(Text(f"retried after: {att.error}", style="dim"))
    if a.statements:
        console.print("[bold]domain knowledge used:[/]")
        for s in a.statements:
            console.print(Text.assemble((f"  {s.score:.2f} ", "dim"), s.render()))
    if not getattr(a, "abstained", False):  # an abstained answer ran no SQL: no table to show
        console.print(rows_table(a.columns, a.rows, 20))
    if len(a.rows) > 20:
        console.print(f"[dim]... {len(a.rows) - 20} more rows (use --json for all)[/]")
    for note in a.notes:
        console.print(Text.assemble(("note: ", "yellow"), note))
    console.print(Text.assemble(("answer: ", "bold green"), a.answer))
    console.print(Text(cost_line(a.timings, a.tokens), style="dim"))


def cost_line(timings: dict[str, float], tokens: dict[str, float]) -> str:
    """"10.7 s (sql 9.0 s, run 0.00 s, answer 1.6 s); 2 LM calls, 1136+49 tokens" from whatever stages ran."""
    parts = [f"{label} {timings[key]:.{2 if key == 'execute_s' else 1}f} s"
             for key, label in (("route_s", "route"), ("synthesize_s", "sql"), ("execute_s", "run"),
                                ("answer_s", "answer"), ("lm_s", "LM")) if key in timings]
    total = f"{timings.get('total_s', 0.0):.1f} s" + (f" ({', '.join(parts)})" if parts else "")
    return (f"{total}; {int(tokens.get('calls', 0))} LM calls, "
            f"{int(tokens.get('prompt_tokens', 0))}+{int(tokens.get('completion_tokens', 0))} tokens")


def render_candidates(cands: Sequence[RouteCandidate], n: int = 5) -> str:
    lines = []
    for i, c in enumerate(cands[:n], 1):
        conf = f" confidence {c.confidence:.2f}" if c.confidence is not None else ""
        lines.append(f"{i}. {c.database}: {', '.join(c.tables)} (score {c.score:.2f}{conf})")
    return "\n".join(lines)


def choose_candidate(cands: Sequence[RouteCandidate], input_fn: Callable[[str], str],
                     print_fn: Callable[[str], None] = print, n: int = 5) -> RouteCandidate:
    """Print the top-``n`` candidates and return the one the user picks (1-based; empty = 1)."""
    if not cands:
        raise TagqlError("no candidate schemas to choose from")
    print_fn(render_candidates(cands, n))
    shown = min(n, len(cands))
    while True:
        raw = (input_fn(f"pick a schema [1-{shown}]") or "1").strip()
        if raw.isdigit() and 1 <= int(raw) <= shown:
            return cands[int(raw) - 1]
        print_fn(f"please answer a number from 1 to {shown}")


__all__ = ["StageProgress", "choose_candidate", "console", "count_progress", "download_progress", "emit_json", "err_console", "escape", "fail",
           "print_answer", "rows_table", "user_errors"]
