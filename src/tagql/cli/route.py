"""``tagql route``: build collections and route questions to (database, tables).

    tagql route index NAME (--spider-tables FILE | --ddl FILE... | --db PATH_OR_URL...) [--remove DB...]
    tagql route --collection NAME [--method ours|bm25|dense] [--k K] --jsonl  < questions.jsonl
    tagql route --collection NAME --question "..." [--pick]     (show the top-5 schemas; pick one)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rich.text import Text

from tagql.cli.output import emit_json, err_console, fail
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
    from tagql.config import load_settings
    from tagql.routing.collection import Collection
    from tagql.routing.hitl import choose_candidate, confidence_note

    try:
        coll = Collection.load(collection, load_settings())
        router = coll.router(method)
        if jsonl:
            for line in sys.stdin:
                if not line.strip():
                    continue
                try:
                    q = json.loads(line)["question"]
                except (ValueError, KeyError, TypeError):
                    from tagql.routing.errors import BadSource

                    raise BadSource("each input line must be a JSON object with a 'question' key") from None
                cands = router.route(q, k)
                out = {"question": q, "candidates": [c.to_dict() for c in cands]}
                note = confidence_note(cands)
                if note:
                    out["note"] = note
                sys.stdout.write(json.dumps(out) + "\n")
                sys.stdout.flush()
            return
        if not question:
            err.print("pass --jsonl (questions on stdin) or --question TEXT")
            raise typer.Exit(2)
        cands = router.route(question, max(k, 5) if pick else k)
        if pick:
            chosen = choose_candidate(cands, input_fn=lambda p: typer.prompt(p, default="1"), print_fn=err.print)
            sys.stdout.write(json.dumps(chosen.to_dict()) + "\n")
            return
        sys.stdout.write(json.dumps({"question": question, "candidates": [c.to_dict() for c in cands]}) + "\n")
        note = confidence_note(cands)
        if note:
            err.print(f"[yellow]note:[/] {note}")
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
    from tagql.config import load_settings
    from tagql.routing.collection import Collection
    from tagql.routing.errors import EmptyCollection
    from tagql.routing.ours import BuildConfig, GraphRouter

    t0 = time.perf_counter()
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=err, transient=True, disable=as_json)
    tasks: dict[str, int] = {}

    def update(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = progress.add_task(stage, total=total)
        progress.update(tasks[stage], completed=done, total=total)

    try:
        with progress:
            coll = Collection.create(name, load_settings())
            existed = bool(coll.entries)
            for r in remove or []:
                coll.remove(r)
            if spider_tables:
                coll.add_spider(spider_tables, spider_databases, progress=update)
            for f in ddl or []:
                coll.add_ddl(f)
            for i, target in enumerate(db or []):
                coll.add_database(target)
                update("reading databases", i + 1, len(db))
            if not coll.entries:
                raise EmptyCollection(f"collection '{name}' would have no databases")
            coll.save()
            info: dict = {}
            if not no_router:
                if existed and (coll.path / "router" / "meta.json").exists():
                    info = GraphRouter.load(coll).update(progress=update)
                else:
                    info = GraphRouter.build(coll, BuildConfig(questions_per_table=questions_per_table, finetune=finetune),
                                            update).meta
        tables = sum(len(e.schema.tables) for e in coll.entries.values())
        summary = {"ok": True, "collection": name, "databases": len(coll.entries), "tables": tables,
                   "graph_edges": coll.graph.g.number_of_edges(), "seconds": round(time.perf_counter() - t0, 1),
                   "path": str(coll.path), "router": {k: v for k, v in info.items() if k != "weights"}}
        if as_json:
            emit_json(summary)
            return
        err.print(Text(f"collection {name}: {len(coll.entries)} databases, {tables} tables, "
                       f"{summary['graph_edges']} graph edges ({summary['seconds']:.1f} s) at {coll.path}"))
        for key, value in summary["router"].items():
            err.print(Text(f"  router {key}: {json.dumps(value, default=str)}"))
    except TagqlError as exc:
        _fail(exc, as_json)
