"""DuckDB databases (``tagql[duckdb]``): a ``.duckdb`` file or a ``duckdb:///path`` URL.

The same guarantees as the other backends, enforced by DuckDB itself:

* **read-only**: the file is opened with ``read_only=True`` (DuckDB refuses every write to it);
* **no way out of the file**: ``enable_external_access = false`` (no ``ATTACH`` of another file, no
  ``COPY ... TO``, no ``read_csv('/etc/...')``, no extension install/load), ``lock_configuration = true``
  so a query cannot ``SET`` it back;
* **one SELECT per query**: DuckDB's own parser (``extract_statements``) must see exactly one statement of
  type SELECT (read-only mode still allows ``CREATE TEMP TABLE``; this refuses it);
* a statement timeout (``interrupt()`` from a timer thread) and the row cap.

Python functions (e.g. the LM operators of :mod:`tagql.tag.udf`) are registered per connection as
vectorized (Arrow) UDFs when ``pyarrow`` is installed, so a function sees up to 2,048 rows per call and can
deduplicate and batch them; without ``pyarrow`` they run row by row. Arguments reach Python as text
(``CAST(... AS VARCHAR)``), through a ``TEMP MACRO`` with one overload per argument count.

Introspection reads DuckDB's catalog functions (``duckdb_tables()``, ``duckdb_columns()``,
``duckdb_constraints()``): the SQLAlchemy inspector of ``duckdb-engine`` does not work with every
SQLAlchemy/DuckDB release.
"""

from __future__ import annotations

import contextlib
import inspect
import sqlite3
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from tagql.errors import DatabaseNotFound, NotADatabase, QueryTimeout, UnsafeQuery, install_hint

if TYPE_CHECKING:
    from tagql.db.schema import Table

DUCKDB_MAGIC = b"DUCK"  # bytes 8..11 of a DuckDB file (after an 8-byte checksum)
MAX_VARARGS = 8  # a variadic function (nargs=-1) accepts 1..MAX_VARARGS arguments on DuckDB

# every connection to a file gets the same configuration (DuckDB refuses a second one in a process)
CONFIG: dict[str, Any] = {
    "enable_external_access": False,
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "lock_configuration": True,
    # DuckDB's buffer manager stops a query past it (a string_agg of 10M rows: an error at once, not 2 GB);
    # a single huge value (repeat('x', 1e9)) is not allocated through it
    "memory_limit": "1GB",
}

_INSTALL_HINT = install_hint("duckdb")
_RETURN_TYPES = {"VARCHAR": "string", "BIGINT": "int64", "DOUBLE": "float64", "BOOLEAN": "bool_"}


def is_duckdb_file(path: Path) -> bool:
    with path.open("rb") as f:
        head = f.read(12)
    return len(head) == 12 and head[8:12] == DUCKDB_MAGIC


def duckdb_engine(path: Path) -> sa.Engine:
    """A SQLAlchemy engine (``duckdb-engine`` dialect) whose connections open ``path`` read-only."""
    try:
        import duckdb  # noqa: F401
        import duckdb_engine  # noqa: F401
    except ImportError as exc:
        raise DatabaseNotFound(f"'{path}' is a DuckDB database but {exc.name} is not installed", _INSTALL_HINT) from exc
    url = sa.engine.URL.create("duckdb", database=str(path.resolve()))
    engine = sa.create_engine(url, connect_args={"read_only": True, "config": dict(CONFIG)},
                              poolclass=sa.pool.QueuePool, pool_size=4)
    try:  # fail now, with the reason (a writer holding the file's lock, a damaged file), not at the first query
        with engine.connect():
            pass
    except Exception as exc:  # any driver error means the file cannot be opened
        engine.dispose()
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise NotADatabase(f"cannot open the DuckDB database '{path}': {reason}",
                           "close other programs writing to it, or check the file") from exc
    return engine


@dataclass
class DuckFunction:
    """A Python function callable from DuckDB SQL. ``vector_fn`` takes one list per argument (all of
    the same length) and returns one result per row; ``returns`` is its SQL type."""

    name: str
    nargs: int  # -1: 1..MAX_VARARGS arguments
    vector_fn: Callable[..., list[Any]]
    returns: str = "VARCHAR"


def rowwise(fn: Callable[..., Any]) -> Callable[..., list[Any]]:
    """A vector function that calls a scalar ``fn`` once per row."""
    def vector(*columns: list[Any]) -> list[Any]:
        return [fn(*row) for row in zip(*columns)]
    return vector


def _internal(token: int, name: str, n: int) -> str:
    return f"__tagql_{token}_{name.lower()}_{n}"


# what is already created on each raw connection ('name/nargs/returns' tags), so each is created once
_registered: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()
_registered_lock = threading.Lock()


def register_functions(raw: Any, functions: dict[str, DuckFunction]) -> None:
    """Create each function on this connection (once). The UDF looks its Python function up in
    ``functions`` at call time, so registering a new one under the same name takes effect at once."""
    if not functions:
        return
    try:
        from duckdb import sqltypes
    except ImportError:  # duckdb < 1.4
        from duckdb import typing as sqltypes  # type: ignore[no-redef]

    try:
        import pyarrow as pa
    except ImportError:  # row-at-a-time fallback
        pa = None
    with _registered_lock:
        done = _registered.setdefault(raw, set())
    # Python UDFs land in the catalog that all connections to this file in this process share, so each
    # Database's functions get their own names (its registry's id: the UDFs reference the registry, which
    # therefore lives as long as they do); the TEMP MACRO named `key` is per connection.
    token = id(functions)
    for key, spec in functions.items():
        arities = list(range(1, MAX_VARARGS + 1)) if spec.nargs < 0 else [spec.nargs]
        tag = f"{key}/{spec.nargs}/{spec.returns}"
        if tag in done:
            continue
        ret = getattr(sqltypes, spec.returns)
        for n in arities:
            internal = _internal(token, key, n)
            with contextlib.suppress(Exception):  # not created yet
                raw.remove_function(internal)
            raw.create_function(
                internal, _trampoline(functions, key, pa, n), [sqltypes.VARCHAR] * n, ret,
                type="arrow" if pa is not None else "native", null_handling="special", side_effects=True,
            )
        params = lambda n: ", ".join(f"a{i}" for i in range(n))
        casts = lambda n: ", ".join(f"CAST(a{i} AS VARCHAR)" for i in range(n))
        overloads = ", ".join(f"({params(n)}) AS {_internal(token, key, n)}({casts(n)})" for n in arities)
        raw.execute(f"CREATE OR REPLACE TEMP MACRO {key}{overloads}")  # name(a0) AS ..., (a0, a1) AS ...
        done.add(tag)


def _trampoline(functions: dict[str, DuckFunction], key: str, pa: Any, n: int) -> Callable[..., Any]:
    if pa is None:
        def fn(*values: Any) -> Any:
            return functions[key].vector_fn(*[[v] for v in values])[0]
    else:
        def fn(*arrays: Any) -> Any:
            spec = functions[key]
            out = spec.vector_fn(*[a.to_pylist() for a in arrays])
            return pa.array(out, type=getattr(pa, _RETURN_TYPES[spec.returns])())
    # DuckDB counts the Python function's parameters: give it exactly n
    fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(f"a{i}", inspect.Parameter.POSITIONAL_ONLY) for i in range(n)])
    return fn


def check_statement(raw: Any, sql: str) -> None:
    """DuckDB's own parser must see exactly one SELECT (read-only mode alone allows temp tables)."""
    import duckdb

    statements = raw.extract_statements(sql)
    if len(statements) != 1:
        raise UnsafeQuery(f"only a single statement may run, got {len(statements)}")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise UnsafeQuery(f"only SELECT queries may run, got {kind.name}")
    check_string_growth(sql)


MAX_BUILT_STRING = 10_000_000  # characters one repeat()/lpad()/rpad() call may build


def check_string_growth(sql: str) -> None:
    """DuckDB cannot interrupt one function call while it runs, and the strings it builds sit outside its
    memory limit: ``repeat('x', 1e9)`` took 44 s at a 2 s limit and 2 GB. So the length of a
    repeat/lpad/rpad must be a literal of at most ``MAX_BUILT_STRING`` (a computed one, even a column of
    ``range(...)``, could be anything)."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
    except Exception:  # noqa: BLE001 -- sqlglot fails on some DuckDB-only syntax (SHOW, SUMMARIZE) with
        return  # IndexError and the like; DuckDB's own parser has accepted it, nothing here to bound
    for call in tree.find_all(exp.Repeat, exp.Pad):
        length = call.args.get("times") if isinstance(call, exp.Repeat) else call.args.get("expression")
        if length is None:
            continue
        value = None
        if isinstance(length, exp.Literal) and length.is_number:
            value = float(length.this)
        if value is None or value > MAX_BUILT_STRING:
            raise UnsafeQuery(f"{call.sql(dialect='duckdb')[:60]}: repeat/lpad/rpad may build at most "
                              f"{MAX_BUILT_STRING:,} characters (a literal length)")


def run_duckdb(
    raw: Any, sql: str, timeout: float, cap: int, functions: dict[str, DuckFunction],
) -> tuple[list[str], list[tuple], bool]:
    import duckdb

    register_functions(raw, functions)
    check_statement(raw, sql)
    timed_out = threading.Event()

    def stop() -> None:
        timed_out.set()
        raw.interrupt()

    timer = threading.Timer(timeout, stop)
    timer.daemon = True
    timer.start()
    try:
        cur = raw.cursor()
        try:
            cur.execute(sql)
            rows = cur.fetchmany(cap + 1)
            columns = [d[0] for d in (cur.description or [])]
        except duckdb.InterruptException as exc:
            raise QueryTimeout(
                f"query stopped after the {timeout:g} s statement timeout",
                "simplify the question or raise TAGQL_DB__STATEMENT_TIMEOUT_S",
            ) from exc
    finally:
        timer.cancel()
    if timed_out.is_set() and len(rows) <= cap:  # interrupted while fetching: never a silent partial result
        raise QueryTimeout(f"query stopped after the {timeout:g} s statement timeout",
                           "simplify the question or raise TAGQL_DB__STATEMENT_TIMEOUT_S")
    return columns, [tuple(r) for r in rows[:cap]], len(rows) > cap


def introspect_duckdb(engine: sa.Engine) -> list[Table]:
    """Tables and views of the main schema with columns, primary and foreign keys."""
    from tagql.db.schema import Column, ForeignKey, Table

    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        where = "database_name = current_database() AND schema_name = current_schema()"
        names = [r[0] for r in raw.execute(
            f"SELECT table_name FROM duckdb_tables() WHERE {where} AND NOT internal ORDER BY table_name").fetchall()]
        names += [r[0] for r in raw.execute(
            f"SELECT view_name FROM duckdb_views() WHERE {where} AND NOT internal AND NOT temporary "
            "ORDER BY view_name").fetchall()]
        cols: dict[str, list[tuple[str, str]]] = {}
        for table, col, dtype in raw.execute(
            f"SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE {where} "
            "ORDER BY table_name, column_index").fetchall():
            cols.setdefault(table, []).append((col, dtype))
        pks: dict[str, set[str]] = {}
        fks: dict[str, list[ForeignKey]] = {}
        for table, kind, names_, ref, ref_cols in raw.execute(
            "SELECT table_name, constraint_type, constraint_column_names, referenced_table, referenced_column_names "
            f"FROM duckdb_constraints() WHERE {where} AND constraint_type IN ('PRIMARY KEY', 'FOREIGN KEY') "
            "ORDER BY table_name, constraint_index").fetchall():
            if kind == "PRIMARY KEY":
                pks.setdefault(table, set()).update(names_)
            elif ref:
                fks.setdefault(table, []).append(ForeignKey(list(names_), ref, list(ref_cols or [])))
    return [
        Table(n, [Column(c, t.upper(), primary_key=c in pks.get(n, set())) for c, t in cols.get(n, [])],
              fks.get(n, []))
        for n in names
    ]


# -- building a DuckDB file from a SQLite one (tests, benchmarks, trying tagql on DuckDB) ------------------
_TYPE_MAP = (("INT", "BIGINT"), ("CHAR", "VARCHAR"), ("CLOB", "VARCHAR"), ("TEXT", "VARCHAR"),
             ("REAL", "DOUBLE"), ("FLOA", "DOUBLE"), ("DOUB", "DOUBLE"), ("DATE", "VARCHAR"), ("BOOL", "BIGINT"))


def _column_type(src: sqlite3.Connection, table: str, column: str, declared: str) -> str:
    """The DuckDB type that holds every value the SQLite column really stores (SQLite does not enforce
    declared types); the declared type decides only for an all-NULL column."""
    kinds = {r[0] for r in src.execute(f"SELECT DISTINCT typeof({column}) FROM {table}")} - {"null"}
    if not kinds:
        up = declared.upper()
        return next((d for s, d in _TYPE_MAP if s in up), "VARCHAR")
    if kinds == {"integer"}:
        return "BIGINT"
    if kinds <= {"integer", "real"}:
        return "DOUBLE"
    if kinds == {"blob"}:
        return "BLOB"
    return "VARCHAR"


def copy_sqlite_to_duckdb(source: str | Path, target: str | Path, *, tables: Sequence[str] | None = None) -> dict[str, int]:
    """Create ``target`` (a new DuckDB file) with the SQLite file's tables, their primary and foreign keys
    (only those the data satisfies: DuckDB enforces them) and rows. Returns row counts per table."""
    import duckdb

    target = Path(target)
    if target.exists():
        raise FileExistsError(f"{target} exists")
    src = sqlite3.connect(f"file:{Path(source).resolve()}?mode=ro", uri=True)
    q = lambda s: '"' + s.replace('"', '""') + '"'
    names = [r[0] for r in src.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
    if tables is not None:
        names = [n for n in names if n in set(tables)]
    info = {n: src.execute(f"PRAGMA table_info({q(n)})").fetchall() for n in names}
    pk = {n: [r[1] for r in sorted(info[n], key=lambda r: r[5]) if r[5]] for n in names}
    for n in names:  # a primary key with NULLs or duplicates cannot be declared in DuckDB
        if pk[n]:
            cols = ", ".join(q(c) for c in pk[n])
            nulls = " OR ".join(f"{q(c)} IS NULL" for c in pk[n])
            bad = src.execute(f"SELECT (SELECT COUNT(*) FROM {q(n)} WHERE {nulls}), "
                              f"(SELECT COUNT(*) FROM (SELECT {cols} FROM {q(n)} GROUP BY {cols} HAVING COUNT(*) > 1))"
                              ).fetchone()
            if any(bad):
                pk[n] = []
    fks: dict[str, list[tuple[list[str], str, list[str]]]] = {}
    for n in names:
        groups: dict[int, tuple[str, list[str], list[str]]] = {}
        for row in src.execute(f"PRAGMA foreign_key_list({q(n)})"):
            ref, frm, to = row[2], row[3], row[4]
            g = groups.setdefault(row[0], (ref, [], []))
            g[1].append(frm)
            g[2].append(to or (pk.get(ref) or [""])[0])
        violated = src.execute(f"PRAGMA foreign_key_check({q(n)})").fetchall()
        for ref, frm, to in groups.values():
            if ref in pk and pk[ref] and sorted(to) == sorted(pk[ref]) and not violated:
                fks.setdefault(n, []).append((frm, ref, to))
    order: list[str] = []  # referenced tables first
    pending = list(names)
    while pending:
        ready = [n for n in pending if all(r in order or r == n for _, r, _ in fks.get(n, []))]
        if not ready:  # a cycle: the first table keeps only keys to tables already created
            ready = pending[:1]
            fks[ready[0]] = [f for f in fks.get(ready[0], []) if f[1] in order or f[1] == ready[0]]
        for n in ready:
            order.append(n)
            pending.remove(n)
    counts: dict[str, int] = {}
    dst = duckdb.connect(str(target))
    try:
        for n in order:
            types = [_column_type(src, q(n), q(r[1]), r[2] or "") for r in info[n]]
            parts = [f"{q(r[1])} {t}" for r, t in zip(info[n], types)]
            if pk[n]:
                parts.append(f"PRIMARY KEY ({', '.join(q(c) for c in pk[n])})")
            for frm, ref, to in fks.get(n, []):
                if ref != n:
                    parts.append(f"FOREIGN KEY ({', '.join(q(c) for c in frm)}) REFERENCES {q(ref)} "
                                 f"({', '.join(q(c) for c in to)})")
            dst.execute(f"CREATE TABLE {q(n)} ({', '.join(parts)})")
            rows = src.execute(f"SELECT {', '.join(q(r[1]) for r in info[n])} FROM {q(n)}").fetchall()
            conv = {"VARCHAR": str, "DOUBLE": float, "BIGINT": int}
            columns = [[None if v is None else conv.get(t, lambda x: x)(v) for v in col]  # SQLite stores any
                       for col, t in zip(zip(*rows), types)] if rows else []  # value in any column
            marks = ", ".join(f"UNNEST(${i + 1}::{t}[])" for i, t in enumerate(types))
            if rows:  # column lists as parameters: ~10x faster than executemany
                dst.execute(f"INSERT INTO {q(n)} SELECT {marks}", [list(c) for c in columns])
            counts[n] = len(rows)
    finally:
        dst.close()
        src.close()
    return counts
