"""``tagql route``: build collections and route questions to (database, tables).

    tagql route index NAME (--spider-tables FILE | --ddl FILE... | --db PATH_OR_URL...) [--remove DB...]
    tagql route --collection NAME [--method ours|bm25|dense] [--k K] --jsonl  < questions.jsonl
    tagql route --collection NAME --question "..." [--pick]     (show the top-5 schemas; pick one)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from tagql.api import UsageError, connect, index_collection, route_note
from tagql.cli.output import choose_candidate, emit_json, err_console, fail
from tagql.errors import TagqlError

app = typer.Typer(add_completion=False, invoke_without_command=True, no_args_is_help=False,
                  help="Route questions to the database and tables that answer them (DBCopilot).")
err = err_console
_fail = fail


@app.callback()
def route(
    ctx: typer.Context,
    collection: Annotated[str | None, typer.Option("--collection", "-c", help="collection name")] = None,
    method: Annotated[str, typer.Option("--method", help="ours | bm25 | dense")] = "ours",
    k: Annotated[int, typer.Option("--k", min=1, help="candidates per question")] = 5,
    jsonl: Annotated[bool, typer.Option("--jsonl", help="read JSON lines {question} on stdin, write one per line")] = False,
    question: Annotated[str | None, typer.Option("--question", "-q", help="route one question")] = None,
    pick: Annotated[bool, typer.Option("--pick", help="show the top-5 schemas and let me choose one")] = False,
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    if not collection:
        err.print(ctx.get_help())
        raise typer.Exit(0 if not (jsonl or question) else 2)
    try:
        session = connect(collection=collection, route_method=method)
        if jsonl:
            for line in sys.stdin:
                if not line.strip():
                    continue
                try:
                    q = json.loads(line)["question"]
                    if not isinstance(q, str):
                        raise TypeError
                except (ValueError, KeyError, TypeError):
                    raise UsageError("each input line must be a JSON object with a 'question' string") from None
                cands = session.route(q, k)
                out = {"question": q, "candidates": [c.model_dump() for c in cands]}
                note = route_note(cands)
                if note:
                    out["note"] = note
                emit_json(out)
            return
        if not question:
            raise UsageError("pass --jsonl (questions on stdin) or --question TEXT")
        cands = session.route(question, max(k, 5) if pick else k)
        if pick:
            chosen = choose_candidate(cands, input_fn=lambda p: typer.prompt(p, default="1"),
                                      print_fn=lambda s: err.print(Text(s)))
            emit_json(chosen.model_dump())
            return
        note = route_note(cands)
        emit_json({"question": question, "candidates": [c.model_dump() for c in cands],
                   **({"note": note} if note else {})})
    except TagqlError as exc:
        _fail(exc, as_json=not pick)  # the output is JSON: so are its errors


@app.command()
def index(
    name: Annotated[str, typer.Argument(help="collection name")],
    spider_tables: Annotated[Path | None, typer.Option("--spider-tables", help="Spider/BIRD tables.json")] = None,
    spider_databases: Annotated[Path | None, typer.Option(help="folder with <db>/<db>.sqlite (default: beside tables.json)")] = None,
    ddl: Annotated[list[Path] | None, typer.Option("--ddl", help="schema-only CREATE TABLE file (repeatable)")] = None,
    db: Annotated[list[str] | None, typer.Option("--db", help="SQLite path or SQLAlchemy URL (repeatable)")] = None,
    remove: Annotated[list[str] | None, typer.Option("--remove", help="drop this database (repeatable)")] = None,
    no_router: Annotated[bool, typer.Option("--no-router", help="skip training 'ours' (bm25/dense still work)")] = False,
    questions_per_table: Annotated[int, typer.Option(help="synthetic questions per table")] = 24,
    finetune: Annotated[bool, typer.Option("--finetune/--no-finetune",
                                           help="fine-tune the encoder on synonym pairs in a new build (~4 min)")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object (errors too)")] = False,
) -> None:
    """Build or update collection NAME, then train (or incrementally update) its router."""
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=err, transient=True, disable=as_json)
    tasks: dict[str, int] = {}

    def update(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = progress.add_task(stage, total=total)
        progress.update(tasks[stage], completed=done, total=total)

    try:
        with progress:
            summary = index_collection(name, spider_tables=spider_tables, spider_databases=spider_databases, ddl=ddl,
                                       databases=db, remove=remove, build_router=not no_router,
                                       questions_per_table=questions_per_table, finetune=finetune, progress=update)
        if as_json:
            emit_json(summary)
            return
        err.print(Text(f"collection {name}: {summary['databases']} databases, {summary['tables']} tables, "
                       f"{summary['graph_edges']} graph edges ({summary['seconds']:.1f} s) at {summary['path']}"))
        for key, value in summary["router"].items():
            err.print(Text(f"  router {key}: {json.dumps(value, default=str)}"))
    except TagqlError as exc:
        _fail(exc, as_json)
