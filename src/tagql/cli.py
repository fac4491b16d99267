"""Command line: ``tagql ask``, ``tagql demo``, ``tagql schema``, ``tagql model`` (+ knowledge, route).

Errors print one line (``error: ...``) and exit with status 2; nothing is left half-written.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.syntax import Syntax
from rich.table import Table

from tagql.cli_support import console, err_console, user_errors
from tagql.config import Settings, config_path, for_tag, load_settings
from tagql.errors import TagqlError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Answer questions over relational databases.")


def model_progress(quiet: bool = False) -> tuple[Callable[[int, int], None], Callable[[], None]]:
    """A rich progress bar for model assembly (shown only when there is work to do)."""
    progress = Progress(
        TextColumn("preparing model (assemble, verify, re-quantize)"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
        console=err_console, transient=True, disable=quiet,
    )
    state: dict[str, Any] = {}

    def update(done: int, total: int) -> None:
        if "task" not in state:
            progress.start()
            state["task"] = progress.add_task("model", total=total)
        progress.update(state["task"], total=total, completed=done)

    return update, progress.stop


def load_llm(settings: Settings, backend: str | None, quiet: bool = False):
    """The configured model, with a progress bar while it is assembled and a spinner while it loads."""
    from tagql.llm import make_llm

    update, stop = model_progress(quiet)
    try:
        with err_console.status("loading the language model...", spinner="dots") if not quiet else _null():
            return make_llm(settings, backend=backend, progress=update)
    finally:
        stop()


def build_session(
    db: str, llm: str | None, settings: Settings, quiet: bool = False, descriptions: Path | None = None,
    store: Path | None = None, knowledge_method: str | None = None, k: int | None = None,
):
    from tagql.db import open_database
    from tagql.pipeline import TagQL, open_knowledge

    database = open_database(db, settings=settings.db, descriptions_dir=descriptions)
    _ = database.schema  # fail early on a bad database, before loading a model
    knowledge = open_knowledge(database.name, settings, store, method=knowledge_method, k=k)
    return TagQL(database, load_llm(settings, llm, quiet), settings=settings, knowledge=knowledge)


@contextmanager
def _null() -> Iterator[None]:
    yield


def print_answer(a: Any) -> None:
    console.rule(f"[bold]{a.question}")
    if a.sql:
        console.print(Syntax(a.sql, "sql", word_wrap=True))
    plan = getattr(a, "plan", None)
    if plan and plan.get("operators"):
        console.print("[bold]LM operators run on the result:[/]")
        for op in plan["operators"]:
            console.print(f"  {json.dumps(op, default=str)}", highlight=False)
    for att in a.attempts[:-1]:
        console.print(f"[dim]retried after: {att.error}[/]", highlight=False)
    if a.statements:
        console.print("[bold]domain knowledge used:[/]")
        for s in a.statements:
            console.print(f"  [dim]{s.score:.2f}[/] {s.render()}", highlight=False)
    table = Table(show_header=True, header_style="bold")
    for c in a.columns:
        table.add_column(str(c))
    for row in a.rows[:20]:
        table.add_row(*["NULL" if v is None else str(v) for v in row])
    console.print(table)
    if len(a.rows) > 20:
        console.print(f"[dim]... {len(a.rows) - 20} more rows (use --json for all)[/]")
    for note in a.notes:
        console.print(f"[yellow]note:[/] {note}")
    console.print(f"[bold green]answer:[/] {a.answer}", highlight=False)
    t = a.timings
    console.print(
        f"[dim]{t['total_s']:.1f} s (sql {t['synthesize_s']:.1f} s, run {t['execute_s']:.2f} s, "
        f"answer {t['answer_s']:.1f} s); {a.tokens['calls']} LM calls, "
        f"{a.tokens['prompt_tokens']}+{a.tokens['completion_tokens']} tokens[/]"
    )


DbOpt = Annotated[str, typer.Option("--db", help="SQLite file path or SQLAlchemy URL")]
LlmOpt = Annotated[str | None, typer.Option("--llm", help="local | openai (default: from config)")]
DescOpt = Annotated[
    Path | None,
    typer.Option("--descriptions", help="folder of BIRD-style column description CSVs (default: next to a SQLite file)"),
]


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="the question, in plain English")],
    db: Annotated[str | None, typer.Option("--db", help="SQLite file path or SQLAlchemy URL")] = None,
    collection: Annotated[
        str | None, typer.Option("--collection", help="route over this collection of databases instead of --db")
    ] = None,
    route_method: Annotated[str, typer.Option("--route-method", help="ours|bm25|dense")] = "ours",
    pick: Annotated[bool, typer.Option("--pick", help="show the top-5 candidate schemas and let me choose")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="with --collection: answer from the best guess even when routing is unsure")
    ] = False,
    llm: LlmOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    descriptions: DescOpt = None,
    store: Annotated[
        Path | None, typer.Option("--store", help="domain-knowledge store (default: <knowledge_dir>/<db>.kb if present)")
    ] = None,
    knowledge_method: Annotated[
        str | None, typer.Option("--knowledge-method", help="statement retrieval: hybrid|sbr|bm25|dense|all|none")
    ] = None,
    k: Annotated[int | None, typer.Option("--k", help="at most K domain statements in the prompt (default 3, above a score floor)")] = None,
    method: Annotated[
        str | None,
        typer.Option("--method", help="tag|text2sql|rag|retrieval_rank|text2sql_lm (default: SQL then LM answer)"),
    ] = None,
) -> None:
    """Answer QUESTION over a database: SQL, result rows and a plain-language answer."""
    with user_errors():
        settings = load_settings()
        if collection:
            answer = _ask_collection(question, collection, route_method, pick, llm, settings, quiet=as_json,
                                     force=force)
        elif not db:
            raise TagqlError("say where to ask", "give --db PATH_OR_URL or --collection NAME")
        else:
            session = build_session(
                db, llm, for_tag(settings) if method else settings, quiet=as_json, descriptions=descriptions,
                store=store, knowledge_method=knowledge_method, k=k,
            )
            if method:
                from tagql.tag.methods import answer as answer_with

                answer = answer_with(session, question, method)
            else:
                answer = session.ask(question)
        if as_json:
            sys.stdout.write(json.dumps(answer.to_dict(), default=str) + "\n")
        else:
            print_answer(answer)


def _ask_collection(
    question: str, name: str, route_method: str, pick: bool, llm: str | None, settings: Settings, quiet: bool,
    force: bool = False,
):
    from tagql.pipeline import RoutedTagQL
    from tagql.routing.collection import Collection
    from tagql.routing.hitl import choose_candidate, confidence_note

    coll = Collection.load(name, settings)
    choose = None
    if pick:
        def choose(cands):
            note = confidence_note(cands)
            if note:
                err_console.print(f"[yellow]note:[/] {note}")
            return choose_candidate(cands, lambda p: typer.prompt(p, default="1"), err_console.print)
    routed = RoutedTagQL(coll, load_llm(settings, llm, quiet), settings=settings, method=route_method, choose=choose,
                         answer_when_unsure=force)
    answer = routed.ask(question)
    if not quiet and answer.routing:
        best = answer.routing[0]
        console.print(f"[dim]routed to {best['database']} ({', '.join(best['tables'])})[/]")
    return answer


DEMO_QUESTIONS = [
    "How many superheroes are published by Marvel Comics?",
    "What is the full name of the superhero named Spider-Man?",
    "Which 3 superheroes are the tallest?",
]


@app.command()
def demo(
    llm: LlmOpt = None,
    question: Annotated[list[str] | None, typer.Option("--question", "-q", help="ask this instead")] = None,
) -> None:
    """Ask a few questions of the bundled demo database (BIRD's superhero, CC BY-SA 4.0)."""
    from tagql.demo import demo_database_path

    with user_errors():
        settings = load_settings()
        path = demo_database_path()
        console.print(f"demo database: [bold]{path}[/] (BIRD 'superhero', CC BY-SA 4.0; see ATTRIBUTION.md)")
        session = build_session(str(path), llm, settings)
        for q in question or DEMO_QUESTIONS:
            try:
                print_answer(session.ask(q))
            except TagqlError as exc:  # one bad question does not end the demo
                err_console.print(f"[bold red]error:[/] {exc.one_line()}", highlight=False)


@app.command()
def schema(db: DbOpt, descriptions: DescOpt = None) -> None:
    """Print the schema as the LLM sees it (CREATE TABLE with comments)."""
    from tagql.db import open_database

    with user_errors():
        database = open_database(db, settings=load_settings().db, descriptions_dir=descriptions)
        console.print(Syntax(database.schema.to_prompt(), "sql", word_wrap=True))


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="one SELECT statement")],
    db: DbOpt,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Run one read-only query through the same checks the pipeline uses (no LLM)."""
    from tagql.db import open_database
    from tagql.tag.answer import json_value
    from tagql.tag.query import prepare_sql

    with user_errors():
        database = open_database(db, settings=load_settings().db)
        result = database.execute(prepare_sql(query, database))
        if as_json:
            rows = [[json_value(v) for v in r] for r in result.rows]
            sys.stdout.write(json.dumps({"columns": result.columns, "rows": rows, "truncated": result.truncated}) + "\n")
            return
        table = Table(*result.columns)
        for r in result.rows[:50]:
            table.add_row(*["NULL" if v is None else str(v) for v in r])
        console.print(table)
        for note in result.notes:
            console.print(f"[yellow]note:[/] {note}")


@app.command()
def model(
    name: Annotated[str | None, typer.Argument(help="pack name (default: the configured model)")] = None,
) -> None:
    """Assemble and verify the embedded model now (it is otherwise done on first use)."""
    from tagql.llm.model_pack import PACKS, REQUANTIZED, resolve_model_path

    with user_errors():
        settings = load_settings()
        update, stop = model_progress()
        try:
            path = resolve_model_path(name or settings.llm.model, settings.cache_dir, update)
        finally:
            stop()
        console.print(f"model ready: {path}")
        known = [*PACKS.values(), *REQUANTIZED.values()]
        console.print("models: " + ", ".join(f"{p.name} ({p.description})" for p in known))


@app.command()
def config() -> None:
    """Show the effective configuration and where it came from."""
    with user_errors():
        settings = load_settings()
        console.print(f"config file: {config_path()} ({'found' if config_path().exists() else 'not present'})")
        console.print_json(settings.model_dump_json())


def _register_subcommands() -> None:
    """Stage packages contribute their own command groups."""
    import importlib

    for module, name in (("tagql.knowledge.cli", "knowledge"), ("tagql.routing.cli", "route")):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                continue
            raise
        app.add_typer(mod.app, name=name)


_register_subcommands()


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
