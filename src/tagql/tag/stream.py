"""LM operators over a query's rows without holding them: the distinct inputs come from the database
(``GROUP BY`` over the query), the rows stream through in chunks (:meth:`tagql.db.Database.stream`: a
server-side cursor on PostgreSQL), so memory grows with the distinct inputs and one chunk, never with the rows.

    for chunk in stream_filter(db, "SELECT * FROM orders", "{country} is a country in Europe", engine):
        ...   # the rows of each fetched chunk that pass

Inside SQLite and DuckDB the same work is done by the SQL functions (:mod:`tagql.tag.udf`); these are for
engines where tagql cannot add functions (PostgreSQL, MySQL) and results too large for the row cap.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from tagql.db.connection import Database
from tagql.tag.operators import OperatorError, SemEngine, resolve_columns


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def distinct_inputs(db: Database, sql: str, instruction: str, engine: SemEngine, *, op: str,
                    timeout_s: float | None = None) -> tuple[list[str], dict[str, int], dict[str, int]]:
    """(the query's columns, the instruction's field -> column index, filled input -> rows it stands for),
    counted by the database: ``SELECT <fields>, COUNT(*) FROM (<sql>) GROUP BY <fields>``, streamed."""
    with db.stream(f"SELECT * FROM ({sql}) AS tagql_q LIMIT 0", timeout_s=timeout_s) as probe:
        for _ in probe:
            pass
        columns = probe.columns
    if not columns:  # an empty first chunk says nothing: ask the engine for the description
        columns = db.execute(f"SELECT * FROM ({sql}) AS tagql_q LIMIT 0", timeout_s=timeout_s).columns
    fields = resolve_columns(instruction, columns, op=op)
    if not fields:
        raise OperatorError(f"{op} instruction {instruction!r} references no column",
                            "name columns in braces, e.g. {City}")
    names = list(fields)
    cols = ", ".join(_quote(columns[fields[n]]) for n in names)
    counts: dict[str, int] = {}
    with db.stream(f"SELECT {cols}, COUNT(*) FROM ({sql}) AS tagql_q GROUP BY {cols}", timeout_s=timeout_s) as rows:
        for chunk in rows:
            for *values, n in chunk:
                key = engine.fill(instruction, dict(zip(names, values)))
                counts[key] = counts.get(key, 0) + int(n)
    return columns, fields, counts


def _record(engine: SemEngine, op: str, instruction: str, counts: dict[str, int], t0: float, c0: int) -> None:
    engine.stats.per_operator.append({
        "op": f"{op} (streamed)", "instruction": instruction, "rows": sum(counts.values()),
        "distinct_inputs": len(counts), "lm_calls": engine.stats.lm_calls - c0,
        "seconds": round(time.perf_counter() - t0, 3)})
    engine.stats.deduped += sum(counts.values()) - len(counts)


def stream_filter(db: Database, sql: str, instruction: str, engine: SemEngine, *, chunk_rows: int = 5000,
                  timeout_s: float | None = None) -> Iterator[list[tuple[Any, ...]]]:
    """The rows of ``sql`` for which ``instruction`` holds, chunk by chunk (see the module doc). Every
    distinct input is judged before the first chunk is fetched (split verdicts see all of them)."""
    t0, c0 = time.perf_counter(), engine.stats.lm_calls
    _, fields, counts = distinct_inputs(db, sql, instruction, engine, op="filter", timeout_s=timeout_s)
    distinct = list(counts)
    with engine.cache.batch():
        verdict = dict(zip(distinct, engine.judge_many(instruction, distinct, weights=[counts[d] for d in distinct])))
    _record(engine, "filter", instruction, counts, t0, c0)
    names = list(fields)
    with db.stream(sql, chunk_rows=chunk_rows, timeout_s=timeout_s) as rows:
        for chunk in rows:
            yield [r for r in chunk if verdict[engine.fill(instruction, {n: r[fields[n]] for n in names})]]


def stream_map(db: Database, sql: str, instruction: str, engine: SemEngine, *, chunk_rows: int = 5000,
               timeout_s: float | None = None, max_tokens: int = 48) -> Iterator[list[tuple[Any, ...]]]:
    """The rows of ``sql``, each with the LM's value for ``instruction`` appended, chunk by chunk."""
    t0, c0 = time.perf_counter(), engine.stats.lm_calls
    _, fields, counts = distinct_inputs(db, sql, instruction, engine, op="map", timeout_s=timeout_s)
    distinct = list(counts)
    with engine.cache.batch():
        value = dict(zip(distinct, engine.map_many(instruction, distinct, max_tokens=max_tokens)))
    _record(engine, "map", instruction, counts, t0, c0)
    names = list(fields)
    with db.stream(sql, chunk_rows=chunk_rows, timeout_s=timeout_s) as rows:
        for chunk in rows:
            yield [r + (value[engine.fill(instruction, {n: r[fields[n]] for n in names})],) for r in chunk]
