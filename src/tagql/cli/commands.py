"""``tagql ask``, ``demo``, ``schema``, ``sql``, ``model``, ``config``: parse, call :mod:`tagql.api`, print."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer
from rich.syntax import Syntax
from rich.text import Text

from tagql.api import Session, connect, demo_database, knowledge_methods, prepare_model, route_note
from tagql.cli.output import (
    StageProgress,
    choose_candidate,
    console,
    download_progress,
    emit_json,
    err_console,
    print_answer,
    rows_table,
    user_errors,
)
from tagql.config import config_path, load_settings
from tagql.errors import TagqlError
from tagql.models import METHODS, RouteCandidate

DbOpt = Annotated[str, typer.Option("--db", help="SQLite/DuckDB file path or SQLAlchemy URL")]
LlmOpt = Annotated[str | None, typer.Option("--llm", help="local | openai (default: from config)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object (errors too: {\"ok\": false, ...})")]
DescOpt = Annotated[
    Path | None,
    typer.Option("--descriptions", help="folder of BIRD-style column description CSVs (default: next to a SQLite file)"),
]


def model_progress(quiet: bool = False):
    """The progress bar shown while the embedded model is assembled on first use (with the reason)."""
    return download_progress("preparing the language model once (assemble, verify, re-quantize)", quiet)


def open_session(
    db: str | None, collection: str | None, *, llm: str | None = None, store: Path | None = None,
    knowledge_method: str | None = None, descriptions: Path | None = None, route_method: str = "ours",
    quiet: bool = False,
) -> tuple[Session, Callable[[], None]]:
    update, stop = model_progress(quiet)
    session = connect(db, llm, collection=collection, knowledge=store, knowledge_method=knowledge_method,
                      descriptions=descriptions, route_method=route_method, progress=update,
                      step_progress=StageProgress(quiet=quiet))
    return session, stop


def load_model(session: Session, method: str, quiet: bool) -> None:
    """Load the model now, with a spinner, so that the question's own work is what follows."""
    with err_console.status("loading the language model...", spinner="dots") if not quiet else nullcontext():
        session.llm(method)


def ask_command(
    question: Annotated[str, typer.Argument(help="the question, in plain English")],
    db: Annotated[str | None, typer.Option("--db", help="SQLite/DuckDB file path or SQLAlchemy URL")] = None,
    collection: Annotated[
        str | None, typer.Option("--collection", help="route over this collection of databases instead of --db")
    ] = None,
    method: Annotated[
        str, typer.Option("--method", help=f"{' | '.join(METHODS)} (sql: SQL, then the LM answers from the rows)")
    ] = "sql",
    route_method: Annotated[str, typer.Option("--route-method", help="ours | bm25 | dense")] = "ours",
    pick: Annotated[bool, typer.Option("--pick", help="with --collection: show the top-5 schemas and let me choose")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="with --collection: answer from the best guess even when routing is unsure")
    ] = False,
    llm: LlmOpt = None,
    as_json: JsonOpt = False,
    descriptions: DescOpt = None,
    store: Annotated[
        Path | None, typer.Option("--store", help="domain-knowledge store (default: <knowledge_dir>/<db>.kb if present)")
    ] = None,
    knowledge_method: Annotated[
        str | None, typer.Option("--knowledge-method", help=f"statement retrieval: {' | '.join(knowledge_methods())}")
    ] = None,
    k: Annotated[int | None, typer.Option("--k", min=0, help="at most K domain statements in the prompt (default 3)")] = None,
    then: Annotated[
        list[str] | None,
        typer.Option("--then", help="a follow-up question (repeatable), asked with the earlier ones as context"),
    ] = None,
) -> None:
    """Answer QUESTION over a database or a collection: SQL, result rows and a plain-language answer.
    Each --then is a follow-up ("and for DC Comics?") answered after it, in one conversation (--json: one
    line per answer)."""
    with user_errors(as_json):
        if pick and as_json:
            raise TagqlError("--pick asks at the terminal; it cannot go with --json", "drop one of them")
        session, stop = open_session(db, collection, llm=llm, store=store, knowledge_method=knowledge_method,
                                     descriptions=descriptions, route_method=route_method, quiet=as_json)
        choose = _terminal_chooser() if pick else None
        try:
            if method != "sql" and not as_json:
                err_console.print(Text(f"--method {method}: planning and LM operators can take minutes on a CPU",
                                       style="dim"))
            on_event = _stderr_events() if as_json or method != "sql" else None
            session.check_options(question, method=method, k=k, choose=choose, force=force)  # before the model
            for follow_up in then or []:
                session.check_options(follow_up, method=method)
            if then and method != "sql":
                raise TagqlError("--then follow-ups are answered with --method sql only", "drop --method or --then")
            load_model(session, method, as_json)
            conversation = session.conversation()
            for i, asked in enumerate([question, *(then or [])]):
                answer = conversation.ask(asked, method=method, k=k, choose=choose if i == 0 else None,
                                          force=force, on_event=on_event)
                if as_json:
                    emit_json(answer.to_dict())
                else:
                    print_answer(answer)  # under a rule with its question
        finally:
            stop()


def _stderr_events():
    """Stages report on stderr as they end (LM operators as they go), so a long --method tag run or a
    --json run is not silent."""

    def on_event(name: str, data: dict) -> None:
        if name == "progress":
            err_console.print(Text(f"{data['operator']}: {data['done']}/{data['total']}", style="dim"))
        elif name == "sql" and data.get("sql"):
            err_console.print(Text(f"sql: {data['sql']}", style="dim"), soft_wrap=True)
        elif name == "rows":
            err_console.print(Text(f"rows: {len(data.get('rows', []))}", style="dim"))
        elif name == "routed":
            err_console.print(Text(f"routed to {data['chosen']['database']}", style="dim"))

    return on_event


def _terminal_chooser():
    def choose(cands: list[RouteCandidate]) -> RouteCandidate:
        note = route_note(cands)
        if note:
            err_console.print(Text.assemble(("note: ", "yellow"), note))
        return choose_candidate(cands, lambda p: typer.prompt(p, default="1"), lambda s: err_console.print(Text(s)))

    return choose


DEMO_QUESTIONS = [
    "How many superheroes are published by Marvel Comics?",
    "What is the full name of the superhero named Spider-Man?",
    "Which 3 publishers have the most superheroes, and how many each?",
]


def demo_command(
    llm: LlmOpt = None,
    question: Annotated[list[str] | None, typer.Option("--question", "-q", help="ask this instead")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Ask a few questions of the bundled demo database (BIRD's superhero, CC BY-SA 4.0)."""
    with user_errors(as_json):
        path = demo_database()
        if not as_json:
            console.print(Text.assemble("demo database: ", (str(path), "bold"),
                                        " (BIRD 'superhero', CC BY-SA 4.0; see ATTRIBUTION.md)"))
        session, stop = open_session(str(path), None, llm=llm, quiet=as_json)
        try:
            load_model(session, "sql", as_json)
        finally:
            stop()
        for q in question or DEMO_QUESTIONS:
            try:
                answer = session.ask(q)
            except TagqlError as exc:  # one bad question does not end the demo
                if as_json:
                    emit_json({"ok": False, "question": q, "error": exc.one_line()})
                else:
                    err_console.print(Text.assemble(("error: ", "bold red"), exc.one_line()))
                continue
            if as_json:
                emit_json(answer.to_dict())
            else:
                print_answer(answer)


def schema_command(
    db: DbOpt, descriptions: DescOpt = None, as_json: JsonOpt = False,
) -> None:
    """Print the schema as the LLM sees it (CREATE TABLE with comments)."""
    with user_errors(as_json):
        session = connect(db, descriptions=descriptions)
        schema = session.schema()
        if as_json:
            emit_json({"database": session.name, "dialect": session.database().dialect, "prompt": schema.to_prompt(),
                       "tables": [{"name": t.name, "columns": [c.name for c in t.columns]} for t in schema.tables]})
        else:
            console.print(Syntax(schema.to_prompt(), "sql", word_wrap=True))


def sql_command(
    query: Annotated[str, typer.Argument(help="one SELECT statement")],
    db: DbOpt,
    as_json: JsonOpt = False,
) -> None:
    """Run one read-only query through the same checks the pipeline uses (no LLM)."""
    with user_errors(as_json):
        result = connect(db).sql(query)
        if as_json:
            emit_json(result.model_dump(mode="json"))
            return
        console.print(rows_table(result.columns, result.rows, 50))
        if len(result.rows) > 50:
            console.print(f"[dim]... {len(result.rows) - 50} more rows (use --json for all)[/]")
        for note in result.notes:
            console.print(Text.assemble(("note: ", "yellow"), note))


def model_command(
    name: Annotated[str | None, typer.Argument(help="pack name (default: the configured model)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Assemble and verify the embedded model now (it is otherwise done on first use)."""
    with user_errors(as_json):
        update, stop = model_progress(as_json)
        try:
            info = prepare_model(name, progress=update)
        finally:
            stop()
        if as_json:
            emit_json(info)
            return
        console.print(Text(f"model ready: {info['path']}"))
        for m in info["models"]:
            role = f"  <- {m['role']}" if m["role"] else ""
            console.print(Text(f"  {m['name']}: {m['description']}{role}"))


def config_command(as_json: JsonOpt = False) -> None:
    """Show the effective configuration and where it came from."""
    with user_errors(as_json):
        settings = load_settings()
        found = config_path().exists()
        if as_json:
            emit_json({"config_file": str(config_path()), "found": found,
                       "settings": settings.model_dump(mode="json")})
            return
        console.print(Text(f"config file: {config_path()} ({'found' if found else 'not present'})"))
        console.print_json(settings.model_dump_json())


def register(app: typer.Typer) -> None:
    app.command("ask")(ask_command)
    app.command("demo")(demo_command)
    app.command("schema")(schema_command)
    app.command("sql")(sql_command)
    app.command("model")(model_command)
    app.command("config")(config_command)


__all__ = ["DEMO_QUESTIONS", "open_session", "register"]
