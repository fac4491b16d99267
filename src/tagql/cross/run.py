"""A question across databases, end to end: plan -> one sub-query per database -> join -> final query.

Everything it needs is passed in (the orchestrator, :mod:`tagql.api`, wires it): the routed candidates,
a function that opens a database of the collection by name, the LLM, and the LM-operator engine for
matching values written differently.

* **plan** (:mod:`tagql.cross.plan`): the LLM picks one or two of the candidates and writes each one's
  sub-question;
* **one database**: the question is answered on it as asked (plain text-to-SQL on its routed schema);
* **two databases**: each sub-question (asked to return the shared entity as ``join_key``) is written as
  SQL by the text-to-SQL stage on its own database and run read-only there; the two results are joined
  in DuckDB (:mod:`tagql.cross.join`, with the LM matching values written differently); the LLM then
  writes the final query over the joined table, which runs read-only on that DuckDB file.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tagql.cross.join import JOIN_KEY, JoinOutcome, SubResult, join_results
from tagql.cross.plan import CrossPlan, Part, plan_question
from tagql.db.connection import Database, Result, open_database
from tagql.db.schema import Schema
from tagql.errors import InvalidQuery, LLMOutputError, QueryFailed, QueryTimeout, TagqlError, UnsafeQuery
from tagql.llm.base import LLM
from tagql.knowledge import ScoredStatement
from tagql.text2sql.query import QuerySynthesizer
from tagql.text2sql.values import ValueMatch

FULL_SCHEMA_TABLES = 20  # a database of at most this many tables shows its whole schema to a sub-query
# a database's domain statements and the stored values a question names: (database, question) -> both
Context = Callable[[str, str], tuple[list[ScoredStatement], list[ValueMatch]]]

_SQL_FAILURES = (LLMOutputError, InvalidQuery, QueryFailed, QueryTimeout, UnsafeQuery)


class UnknownDatabase(TagqlError):
    """A database the question was routed or planned to is not in the collection."""


class SubQueryFailed(TagqlError):
    """One database's part of the question could not be answered. ``details``: the plan and the queries
    tried so far."""

    hint = "ask that database the part it holds directly, or rephrase the question"
    details: dict[str, Any] | None = None


@dataclass
class Step:
    """One query of the answer: a sub-query on a database, or the final query over the joined table."""

    database: str
    question: str
    sql: str = ""
    rows: int = 0
    seconds: float = 0.0
    attempts: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"database": self.database, "question": self.question, "sql": self.sql, "rows": self.rows,
                "seconds": round(self.seconds, 3), "attempts": self.attempts}


@dataclass
class CrossOutcome:
    plan: CrossPlan
    result: Result
    steps: list[Step]
    join: JoinOutcome | None = None
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    value_joins: list[dict[str, Any]] = field(default_factory=list)  # merged: the values the LM matched
    links: list[str] = field(default_factory=list)  # merged: columns of the two databases found to share values

    @property
    def sql(self) -> str:
        return self.steps[-1].sql if self.steps else ""

    def to_dict(self) -> dict[str, Any]:
        return {**self.plan.to_dict(), "steps": [s.to_dict() for s in self.steps],
                "join": self.join.to_dict() if self.join else None, "value_joins": list(self.value_joins),
                "links": list(self.links)}


def sub_question(question: str, key: str) -> str:
    """A part's sub-question, asked to return the shared entity under one name."""
    what = key or "shared entity"
    return f"{question.rstrip(' ?.')}. Also return the {what} as a column named {JOIN_KEY}."


def final_question(question: str, plan: CrossPlan) -> str:
    """The question over the joined table, saying that each part's conditions already hold there."""
    done = "; ".join(p.question.rstrip(" .?") for p in plan.parts)
    return (f"{question}\n(The table joined is the only table. Its rows already answer these parts, "
            f"joined on the {plan.key or 'shared entity'}: {done}. Do not filter them again.)")


def answer_across(
    question: str, candidates: Sequence[tuple[str, Sequence[str] | None]], *, llm: LLM,
    open_db: Callable[[str], Database], engine: Any = None, max_candidates: int = 4, max_tokens: int = 384,
    retries: int = 1, workdir: Path | None = None, strategy: str = "merged", context: Context | None = None,
) -> CrossOutcome:
    """Answer ``question`` over the routed ``candidates`` (``(database, tables or None)``, best first), with
    ``strategy`` ``merged`` (one query over both databases' tables, :mod:`tagql.cross.merged`; the default)
    or ``decompose`` (one LLM-written sub-question per database, :func:`answer_decomposed`). ``context(database,
    question)`` gives a database's domain statements and the stored values the question names, for the SQL
    prompt of the ``merged`` query (the statements and values of every database it reads)."""
    if strategy == "decompose":
        return answer_decomposed(question, candidates, llm=llm, open_db=open_db, engine=engine,
                                 max_candidates=max_candidates, max_tokens=max_tokens, retries=retries,
                                 workdir=workdir)
    if strategy != "merged":
        raise TagqlError(f"unknown cross strategy '{strategy}'", "use merged or decompose")
    return answer_merged(question, candidates, llm=llm, open_db=open_db, engine=engine,
                         max_candidates=max_candidates, max_tokens=max_tokens, retries=retries, workdir=workdir,
                         context=context)


def _open_all(candidates: Sequence[tuple[str, Sequence[str] | None]], open_db: Callable[[str], Database],
              max_candidates: int) -> tuple[dict[str, Database], dict[str, Sequence[str] | None]]:
    cands = list(candidates)[:max_candidates]
    if not cands:
        raise UnknownDatabase("no database was routed for the question")
    dbs: dict[str, Database] = {}
    routed: dict[str, Sequence[str] | None] = {}
    for name, tables in cands:
        try:
            dbs[name] = open_db(name)
        except TagqlError as exc:
            raise UnknownDatabase(f"cannot open database '{name}': {exc.one_line()}") from exc
        routed[name] = tables
    return dbs, routed


def answer_merged(
    question: str, candidates: Sequence[tuple[str, Sequence[str] | None]], *, llm: LLM,
    open_db: Callable[[str], Database], engine: Any = None, max_candidates: int = 4, max_tokens: int = 384,
    retries: int = 1, workdir: Path | None = None, context: Context | None = None,
) -> CrossOutcome:
    """The ``merged`` strategy (see :mod:`tagql.cross.merged`)."""
    from tagql.cross.merged import (
        choose_databases,
        cross_equalities,
        joinable_pairs,
        joins_on_links,
        match_joins,
        merge,
        mismatched_types,
        one_sided,
        rewritten_copy,
        text_values,
        value_links,
        with_links,
    )

    t0 = time.perf_counter()
    dbs, routed = _open_all(candidates, open_db, max_candidates)
    names = list(dbs)
    values = {n: text_values(dbs[n]) for n in names}
    pairs = joinable_pairs(values, names)
    chosen = choose_databases(question, names, pairs, dbs, llm)
    plan = CrossPlan([Part(n, question) for n in chosen], "")
    statements: list[ScoredStatement] = []
    hints: list[ValueMatch] = []
    for name in chosen if context is not None else ():
        found = context(name, question)
        statements += found[0]
        hints += found[1]
    t_plan = time.perf_counter() - t0
    steps: list[Step] = []
    if len(chosen) == 1:
        db = dbs[chosen[0]]
        result = _run_query(db, question, _prompt_schema(db, routed[chosen[0]]), chosen[0], llm, max_tokens,
                            retries, steps, plan, statements, hints)
        return CrossOutcome(plan, result, steps, timings={
            "plan_s": round(t_plan, 3), "total_s": round(time.perf_counter() - t0, 3)})
    base = Path(workdir) if workdir is not None else Path(tempfile.gettempdir()) / "tagql-cross"
    t1 = time.perf_counter()
    merged = merge([dbs[n] for n in chosen], base)
    t_merge = time.perf_counter() - t1
    links = value_links(values, merged)
    keyed = with_links(merged.schema, links)
    mdb = open_database(merged.path, name=" + ".join(chosen))
    _declare_keys(mdb, keyed)
    try:
        def check(sql: str) -> None:
            why = one_sided(sql, merged, links) or mismatched_types(sql, merged, links)
            if why is not None:
                raise InvalidQuery(why)

        synth = QuerySynthesizer(mdb, llm, max_tokens=max_tokens, retries=retries, prompt_schema=keyed, check=check)
        t2 = time.perf_counter()
        try:
            outcome = synth.run(question, statements, values=hints)
        except _SQL_FAILURES as exc:
            steps.append(Step(plan.parts[0].database + " + " + plan.parts[1].database, question,
                              attempts=[{"sql": a.sql, "error": a.error} for a in getattr(exc, "attempts", []) or []]))
            failed = SubQueryFailed(f"the query over {' + '.join(chosen)} failed: {exc.one_line()}")
            failed.details = {**plan.to_dict(), "steps": [s.to_dict() for s in steps]}
            raise failed from exc
        t_sql = time.perf_counter() - t2
        t3 = time.perf_counter()
        sql, moved = joins_on_links(outcome.sql, merged, links)
        result = outcome.result
        if moved:
            try:
                result = mdb.execute(sql)
            except TagqlError:  # the moved query does not run: the model's own stands
                sql, moved = outcome.sql, []
        equalities = cross_equalities(sql, merged)
        joins = match_joins(mdb, equalities, "", engine, schema=merged.schema) if equalities else []
        if any(j.matched for j in joins):
            with tempfile.TemporaryDirectory(prefix="tagql-cross-", dir=base) as tmp:
                copy = rewritten_copy(merged, joins, Path(tmp) / "matched.duckdb")
                cdb = open_database(copy, name=mdb.name)
                try:
                    result = cdb.execute(sql)
                finally:
                    cdb.close()
        t_join = time.perf_counter() - t3
    finally:
        mdb.close()
    steps.append(Step(mdb.name, question, sql, len(result.rows), t_sql,
                      [{"sql": a.sql, "error": a.error} for a in outcome.attempts if a.error]))
    out = CrossOutcome(plan, result, steps, timings={
        "plan_s": round(t_plan, 3), "merge_s": round(t_merge, 3), "sql_s": round(t_sql, 3),
        "join_s": round(t_join, 3), "total_s": round(time.perf_counter() - t0, 3)},
        notes=[*(f"joined on the value link: {m}" for m in moved), *result.notes])
    out.value_joins = [j.to_dict() for j in joins]
    out.links = [f"{a}.{b} -> {c}.{d}" for (a, b), (c, d) in links]
    if equalities == []:
        out.notes.append("the query joins no column of one database to one of the other")
    return out


def _declare_keys(db: Database, keyed: Schema) -> None:
    """The merged file's tables were copied without their keys: give its schema (what the repairs of
    :mod:`tagql.db.repair` follow to join tables, declared keys and those implied by primary keys' names)
    the primary and foreign keys of the source databases and the value links."""
    for table in db.schema.tables:
        source = keyed.table(table.name)
        if source is not None:
            table.foreign_keys = [fk for fk in source.foreign_keys if db.schema.table(fk.ref_table) is not None]
            for column in table.columns:
                own = source.column(column.name)
                column.primary_key = bool(own is not None and own.primary_key)


def _run_query(db: Database, asked: str, schema: Schema | None, label: str, llm: LLM, max_tokens: int,
               retries: int, steps: list[Step], plan: CrossPlan, statements: Sequence[ScoredStatement] = (),
               hints: Sequence[ValueMatch] = ()) -> Result:
    synth = QuerySynthesizer(db, llm, max_tokens=max_tokens, retries=retries, prompt_schema=schema)
    t = time.perf_counter()
    try:
        outcome = synth.run(asked, list(statements), values=hints)
    except _SQL_FAILURES as exc:
        steps.append(Step(label, asked, seconds=time.perf_counter() - t,
                          attempts=[{"sql": a.sql, "error": a.error} for a in getattr(exc, "attempts", []) or []]))
        failed = SubQueryFailed(f"the query on '{label}' failed: {exc.one_line()}")
        failed.details = {**plan.to_dict(), "steps": [s.to_dict() for s in steps]}
        raise failed from exc
    steps.append(Step(label, asked, outcome.sql, len(outcome.result.rows), time.perf_counter() - t,
                      [{"sql": a.sql, "error": a.error} for a in outcome.attempts if a.error]))
    return outcome.result


def answer_decomposed(
    question: str, candidates: Sequence[tuple[str, Sequence[str] | None]], *, llm: LLM,
    open_db: Callable[[str], Database], engine: Any = None, max_candidates: int = 4, max_tokens: int = 384,
    retries: int = 1, workdir: Path | None = None,
) -> CrossOutcome:
    """Answer ``question`` over the routed ``candidates`` (``(database, tables or None)``, best first).

    ``open_db(name)`` opens a database of the collection; ``engine`` (a
    :class:`~tagql.tag.operators.SemEngine` on ``llm``) matches values written differently when joining
    (None: only equal values join). Raises :class:`UnknownDatabase`, :class:`SubQueryFailed`,
    :class:`~tagql.cross.plan.CrossPlanError` or :class:`~tagql.cross.join.JoinFailed` with one line."""
    t0 = time.perf_counter()
    dbs, routed = _open_all(candidates, open_db, max_candidates)
    plan = plan_question(question, [(n, _prompt_schema(dbs[n], routed[n]) or dbs[n].schema) for n in dbs], llm)
    t_plan = time.perf_counter() - t0
    steps: list[Step] = []

    def run(db: Database, asked: str, schema: Schema | None, label: str) -> Result:
        # one more repair than a plain question: a sub-question is the model's own wording, not the user's
        return _run_query(db, asked, schema, label, llm, max_tokens, retries + 1, steps, plan)

    if len(plan.parts) == 1:
        part = plan.parts[0]
        result = run(dbs[part.database], question, _prompt_schema(dbs[part.database], routed[part.database]),
                     part.database)
        return CrossOutcome(plan, result, steps, timings={
            "plan_s": round(t_plan, 3), "total_s": round(time.perf_counter() - t0, 3)})
    subs: list[SubResult] = []
    cut: list[str] = []
    t1 = time.perf_counter()
    for part in plan.parts:
        db = dbs[part.database]
        r = run(db, sub_question(part.question, plan.key), _prompt_schema(db, routed[part.database]), part.database)
        subs.append(SubResult(part.database, list(r.columns), list(r.rows), r.sql))
        if r.truncated:
            cut.append(f"the query on '{part.database}' hit the row cap: the join saw its first {len(r.rows)} rows")
    t_sub = time.perf_counter() - t1
    t2 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tagql-cross-", dir=workdir) as tmp:
        path = Path(tmp) / "joined.duckdb"
        joined = join_results(subs[0], subs[1], key=plan.key, engine=engine, path=path)
        t_join = time.perf_counter() - t2
        t3 = time.perf_counter()
        table = open_database(path, name="joined")
        try:
            result = run(table, final_question(question, plan), None, "joined")
        finally:
            table.close()
    return CrossOutcome(plan, result, steps, joined, timings={
        "plan_s": round(t_plan, 3), "subqueries_s": round(t_sub, 3), "join_s": round(t_join, 3),
        "final_s": round(time.perf_counter() - t3, 3), "total_s": round(time.perf_counter() - t0, 3)},
        notes=[*cut, *joined.notes])


def _prompt_schema(db: Database, tables: Sequence[str] | None) -> Schema | None:
    """The schema a sub-query is written from: the whole one for a small database (the router chose its
    tables for the whole question, not for this database's part), else the routed tables."""
    if len(db.schema.tables) <= FULL_SCHEMA_TABLES or not tables:
        return None
    subset = db.schema.subset(tables)
    return subset if subset.tables else None
