"""``tagql knowledge ...``: add, review, check, list, retrieve, import the paper's data, set exemplars.

A store is one SQLite file per database: ``--store PATH``, or by default
``<knowledge_dir>/<db name>.kb`` (``knowledge_dir`` from the config, next to the user's config file).
``--db`` is a database path/URL, or a BIRD/Spider ``tables.json`` with ``--db-id NAME``.
"""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from tagql.api import (
    STATEMENT_STATUSES,
    KnowledgeBase,
    KnowledgeStoreError,
    add_statements,
    check_choice,
    default_knowledge_method,
    exemplars_from_json,
    import_paper_statements,
    knowledge_methods,
    open_knowledge_base,
    statement_holds_back,
)
from tagql.cli.output import StageProgress, console, emit_json, err_console, fail, user_errors

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Domain knowledge: expert statements per database.")
out = console
err = err_console
_fail = fail
_errors = user_errors


def open_kb(store: Path | None, db: str | None, db_id: str | None, *, create: bool) -> KnowledgeBase:
    return open_knowledge_base(db, store=store, db_id=db_id, create=create)[0]


StoreOpt = Annotated[Path | None, typer.Option("--store", help="knowledge store file (default: per database in knowledge_dir)")]
DbOpt = Annotated[str | None, typer.Option("--db", help="database path/URL, or a tables.json (with --db-id)")]
DbIdOpt = Annotated[str | None, typer.Option("--db-id", help="database name inside a tables.json")]


@app.command()
def add(
    statement: Annotated[list[str] | None, typer.Argument(help="NL statement(s)")] = None,
    db: DbOpt = None, db_id: DbIdOpt = None, store: StoreOpt = None,
    file: Annotated[Path | None, typer.Option("--file", help="one statement per line")] = None,
    structured: Annotated[bool, typer.Option("--structured", help="input is already \"'x' refers to y\"")] = False,
    approved: Annotated[bool, typer.Option("--approved", help="already reviewed: store as approved")] = False,
    author: Annotated[str, typer.Option("--author")] = "",
    llm: Annotated[str | None, typer.Option("--llm", help="local | openai (structuring)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON (one object per statement; errors too)")] = False,
) -> None:
    """Add statements; NL ones are structured by the LLM and validated against the schema. They are stored
    as 'proposed' and used in answers once a reviewer approves them (`tagql knowledge review`), or at once
    with --approved (for the store's owner)."""
    with _errors(as_json):
        items = list(statement or [])
        if file is not None:
            try:
                items += [ln.strip() for ln in file.read_text().splitlines() if ln.strip()]
            except OSError as exc:
                raise KnowledgeStoreError(f"cannot read {file}: {exc.strerror}") from None
        if not items:
            raise KnowledgeStoreError("nothing to add", "pass a statement or --file")
        if not db and store is None:
            raise KnowledgeStoreError("add needs --db (the statements are about a database)")
        if llm is not None:
            check_choice("llm backend", llm, ("local", "openai"))
        kb, database = open_knowledge_base(db, store=store, db_id=db_id, create=True)
        with err.status("structuring with the language model...") if not (structured or as_json) else nullcontext():
            added = add_statements(kb, items, structured=structured, approved=approved, author=author, llm=llm,
                                   database=database)
        for s in added:
            _show(s, as_json)
        ids = [s.id for s in added]
        pending = sum(s.status == "proposed" for s in added)
        err.print(f"{len(ids)} statement(s) stored in {kb.path}"
                  + (f"; {pending} proposed: used once approved (tagql knowledge review)" if pending else ""))


@app.command("list")
def list_(
    db: DbOpt = None, db_id: DbIdOpt = None, store: StoreOpt = None,
    status: Annotated[str | None, typer.Option("--status", help="proposed | approved | rejected")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per line")] = False,
) -> None:
    """List statements with their NL original, structured form and status."""
    with _errors(as_json):
        if status and status not in STATEMENT_STATUSES:
            raise KnowledgeStoreError(f"unknown status {status!r}", "use proposed, approved or rejected")
        kb = open_kb(store, db, db_id, create=False)
        rows = kb.list(status)
        if as_json:
            for s in rows:
                sys.stdout.write(json.dumps(s.to_dict()) + "\n")
            return
        t = Table(show_header=True, header_style="bold")
        for c in ("id", "status", "NL statement", "structured", "note"):
            t.add_column(c, overflow="fold")
        for s in rows:
            t.add_row(str(s.id), s.status, s.nl, s.structured, s.reason)
        out.print(t)
        err.print(", ".join(f"{k}: {v}" for k, v in kb.count().items()))


@app.command()
def review(
    db: DbOpt = None, db_id: DbIdOpt = None, store: StoreOpt = None,
    approve: Annotated[list[int] | None, typer.Option("--approve", help="approve statement ID")] = None,
    reject: Annotated[list[int] | None, typer.Option("--reject", help="reject statement ID")] = None,
    edit: Annotated[int | None, typer.Option("--edit", help="edit statement ID (with --text/--sql)")] = None,
    text: Annotated[str | None, typer.Option("--text")] = None,
    sql: Annotated[str | None, typer.Option("--sql")] = None,
    delete: Annotated[list[int] | None, typer.Option("--delete", help="delete statement ID")] = None,
    reason: Annotated[str, typer.Option("--reason")] = "",
    as_json: Annotated[bool, typer.Option("--json", help="print JSON (one object per statement; errors too)")] = False,
) -> None:
    """Review proposed statements: interactively, or with --approve/--reject/--edit/--delete IDs."""
    with _errors(as_json):
        kb = open_kb(store, db, db_id, create=False)
        scripted = bool(approve or reject or edit is not None or delete)
        if as_json and not scripted:
            raise KnowledgeStoreError("--json reviews with --approve/--reject/--edit/--delete IDs",
                                      "the interactive review asks at the terminal")
        for i in approve or []:
            _show(kb.approve(i), as_json)
        for i in reject or []:
            _show(kb.reject(i, reason), as_json)
        if edit is not None:
            if text is None and sql is None:
                raise KnowledgeStoreError("--edit needs --text and/or --sql")
            _show(kb.edit(edit, text=text, sql=sql), as_json)
        for i in delete or []:
            kb.delete(i)
            if as_json:
                emit_json({"id": i, "deleted": True})
            else:
                out.print(f"#{i} deleted")
        if scripted:
            return
        pending = kb.list("proposed")
        if not pending:
            out.print("no proposed statements")
            return
        for s in pending:
            out.rule(f"#{s.id}")
            out.print(f"[bold]NL:[/]         {escape(s.nl)}", highlight=False)
            out.print(f"[bold]structured:[/] {escape(s.structured)}", highlight=False)
            if s.reason:
                out.print(f"[yellow]problem:[/]    {escape(s.reason)}", highlight=False)
            while True:
                choice = typer.prompt("[a]pprove, [r]eject, [e]dit, [s]kip, [q]uit", default="s").strip().lower()[:1]
                if choice == "a":
                    _show(kb.approve(s.id))
                elif choice == "r":
                    _show(kb.reject(s.id, typer.prompt("reason", default="")))
                elif choice == "e":
                    new_text = typer.prompt("text", default=s.text)
                    new_sql = typer.prompt("sql", default=s.sql)
                    s = kb.edit(s.id, text=new_text, sql=new_sql)
                    _show(s)
                    continue
                elif choice == "q":
                    return
                break


@app.command()
def check(db: DbOpt = None, db_id: DbIdOpt = None, store: StoreOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON (one object per statement; errors too)")] = False,
) -> None:
    """Validate every statement again, against the database's current schema and, when --db is a live
    database, its data (a constant the column does not hold); statuses stay, reasons are updated."""
    with _errors(as_json):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        kb, database = open_knowledge_base(db, store=store, db_id=db_id)
        with Progress(TextColumn("checking statements"), BarColumn(), MofNCompleteColumn(), console=err,
                      transient=True, disable=as_json) as bar:
            task = bar.add_task("check", total=None)
            changed = kb.check(database, progress=lambda done, total: bar.update(task, completed=done, total=total))
        live = [s for s in kb.list(("proposed", "approved")) if s.sql]
        held = sum(statement_holds_back(s.reason) for s in live if s.status == "approved")
        against = "schema and data" if database is not None else "schema only"
        if as_json:
            emit_json({"ok": True, "checked": len(live), "against": against, "held_back": held,
                       "changed": [{"id": st.id, "structured": st.structured, "was": st.reason, "now": reason}
                                   for st, reason in changed]})
            return
        for st, reason in changed:
            was = f" (was: {escape(st.reason)})" if st.reason else ""
            now = f"[yellow]{escape(reason)}[/]" if reason else "[green]valid[/]"
            out.print(f"#{st.id} {escape(st.structured)}: {now}{was}", highlight=False, soft_wrap=True)
        err.print(f"{len(live)} statement(s) checked against the {against}, {len(changed)} reason(s) changed; "
                  f"{held} approved statement(s) held back from prompts until fixed")


def _show(s: Any, as_json: bool = False) -> None:
    if as_json:
        emit_json(s.to_dict())
        return
    note = f"  [yellow]({escape(s.reason)})[/]" if s.reason else ""
    out.print(f"#{s.id} \\[{s.status}] {escape(s.structured)}{note}", highlight=False, soft_wrap=True)


@app.command()
def retrieve(
    store: Annotated[Path, typer.Option("--store", help="knowledge store file")],
    method: Annotated[str, typer.Option("--method", help="|".join(knowledge_methods()))] = default_knowledge_method(),
    k: Annotated[int | None, typer.Option(
        "--k", min=0, help="exactly the top K (default: up to 3 above the method's score floor)")] = None,
    jsonl: Annotated[bool, typer.Option("--jsonl", help="read JSON lines with 'question' from stdin")] = False,
    question: Annotated[str | None, typer.Argument(help="one question (without --jsonl)")] = None,
    all_statuses: Annotated[bool, typer.Option("--all-statuses", help="also proposed statements")] = False,
) -> None:
    """Retrieve statements per question; with --jsonl, one JSON line out per line in, in order."""
    with _errors():
        check_choice("retrieval method", method, knowledge_methods())
        kb = open_knowledge_base(store=store)[0]  # with the configured embedder and static-table cache
        statuses = ("approved", "proposed") if all_statuses else ("approved",)
        ret = kb.retriever(method, statuses=statuses, progress=StageProgress())
        ret.refresh()  # load models and the index once, before reading input
        if not jsonl:
            if not question:
                raise KnowledgeStoreError("give a QUESTION or --jsonl")
            for s in ret.retrieve(question, k):
                out.print(f"{s.score:.3f}  {escape(s.render())}", highlight=False, soft_wrap=True)
            return
        for n, line in enumerate(sys.stdin, 1):
            if not line.strip():
                continue
            try:
                q = json.loads(line)["question"]
                if not isinstance(q, str):
                    raise TypeError("question is not a string")
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise KnowledgeStoreError(f"input line {n}: expected a JSON object with a 'question' string ({exc})") from None
            got = ret.retrieve(q, k)
            rec = {"question": q, "statements": [{"text": s.text, "sql": s.sql, "score": s.score} for s in got]}
            sys.stdout.write(json.dumps(rec) + "\n")
            sys.stdout.flush()


@app.command("import-paper")
def import_paper(
    data: Annotated[Path, typer.Option("--data", help="the shared data folder (has domain_knowledge/)")],
    out_dir: Annotated[Path, typer.Option("--out", help="folder for one <db>.kb per database")],
    only: Annotated[list[str] | None, typer.Option("--only", help="database name(s); default: all 11")] = None,
    nl: Annotated[bool, typer.Option("--nl", help="structure the NL statements with the LLM instead")] = False,
    llm: Annotated[str | None, typer.Option("--llm")] = None,
) -> None:
    """Build one store per BIRD database from the paper's IN-set statements (set1 files); where the
    database's data is present, statements are also checked against its values."""
    with _errors():
        for name, kb, n in import_paper_statements(data, out_dir, only, llm=llm if nl else None):
            out.print(f"{name}: {n} statements -> {kb.path} ({', '.join(f'{k} {v}' for k, v in kb.count().items())})")


@app.command()
def exemplars(
    db: DbOpt = None, db_id: DbIdOpt = None, store: StoreOpt = None,
    file: Annotated[Path | None, typer.Option("--file", help="JSON list of {nl, structured}")] = None,
) -> None:
    """Show, or set with --file, the per-database few-shot exemplars used for structuring."""
    with _errors():
        kb = open_kb(store, db, db_id, create=False)
        if file is not None:
            try:
                kb.set_exemplars(exemplars_from_json(file.read_text()))
            except OSError as exc:
                raise KnowledgeStoreError(f"cannot read {file}: {exc.strerror}") from None
        for e in kb.exemplars():
            out.print(f"{escape(e.nl)}\n  -> {escape(e.structured)}", highlight=False)
