"""Open a database (SQLite path or any SQLAlchemy URL) and run queries safely.

Read-only by construction: SQLite is opened with ``mode=ro`` and an authorizer that denies every
write action; server databases run each query in a read-only transaction that is rolled back.
Every query has a statement timeout and a row cap.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError

from tagql.config import DatabaseSettings
from tagql.db.introspect import introspect
from tagql.db.schema import Schema
from tagql.errors import DatabaseNotFound, NotADatabase, QueryFailed, QueryTimeout, UnsafeQuery, install_hint

# sqlglot dialect names for SQLAlchemy backends
_DIALECTS = {
    "sqlite": "sqlite", "postgresql": "postgres", "mysql": "mysql", "mariadb": "mysql", "mssql": "tsql",
    "oracle": "oracle", "duckdb": "duckdb", "snowflake": "snowflake", "bigquery": "bigquery",
}

# SQLite authorizer: only reading is allowed. PRAGMAs are allowed only for these read-only
# introspection pragmas (SQLAlchemy's inspector uses them); everything else is denied.
_READ_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}
for _name in ("SQLITE_RECURSIVE",):
    if hasattr(sqlite3, _name):
        _READ_ACTIONS.add(getattr(sqlite3, _name))
_READ_PRAGMAS = {
    "table_info", "table_xinfo", "foreign_key_list", "index_list", "index_info", "index_xinfo",
    "database_list", "table_list", "collation_list",
}
_QUERY_PRAGMAS = {"read_uncommitted", "foreign_keys", "encoding", "page_size", "user_version", "schema_version"}


def _sqlite_authorizer(action: int, arg1: str | None, arg2: str | None, db: str | None, src: str | None) -> int:
    if action in _READ_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA:
        name = (arg1 or "").lower()
        if name in _READ_PRAGMAS or (name in _QUERY_PRAGMAS and arg2 is None):
            return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass
class Result:
    """Rows of one query. ``truncated`` says the row cap cut it (never silently)."""

    sql: str
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool = False
    row_cap: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r)) for r in self.rows]


class Database:
    """A connection target plus its schema. Create with :func:`open_database`."""

    def __init__(
        self, engine: sa.Engine, *, name: str, settings: DatabaseSettings | None = None,
        descriptions_dir: Path | None = None, path: Path | None = None,
    ) -> None:
        self.engine = engine
        self.name = name
        self.settings = settings or DatabaseSettings()
        self.descriptions_dir = descriptions_dir
        self.path = path
        self.dialect = _DIALECTS.get(engine.dialect.name, engine.dialect.name)
        dbapi = getattr(engine.dialect, "loaded_dbapi", None) or getattr(engine.dialect, "dbapi", None)
        self._driver_error: type[BaseException] = getattr(dbapi, "Error", sqlite3.Error)
        self._functions: dict[tuple[str, int], Any] = {}
        self._duck_functions: dict[str, Any] = {}  # DuckDB: name (lower) -> duck.DuckFunction

    def register_function(
        self, name: str, nargs: int, fn: Any, *, vector_fn: Any = None, returns: str = "VARCHAR",
    ) -> None:
        """Make a Python function callable from SQL on SQLite or DuckDB (e.g. LM operators as UDFs).

        Applied to the pooled connection before each query; ``nargs=-1`` accepts any number. On DuckDB
        (see ``duck.py``) arguments arrive as text, ``vector_fn`` (one list per argument in, one result per
        row out) lets the function see many rows at once, and ``returns`` is the SQL type of the result."""
        if self.dialect not in ("sqlite", "duckdb"):
            raise QueryFailed(f"SQL functions can only be registered on SQLite or DuckDB, not {self.dialect}")
        self._functions[(name, nargs)] = fn
        if self.dialect == "duckdb":
            from tagql.db.duck import DuckFunction, rowwise

            self._duck_functions[name.lower()] = DuckFunction(name, nargs, vector_fn or rowwise(fn), returns)

    def __repr__(self) -> str:
        return f"Database({self.name!r}, dialect={self.dialect!r})"

    @cached_property
    def schema(self) -> Schema:
        return introspect(self, sample_values=self.settings.sample_values)

    def execute(self, sql: str, *, timeout_s: float | None = None, row_cap: int | None = None) -> Result:
        """Run one query read-only, under a timeout and a row cap."""
        timeout = self.settings.statement_timeout_s if timeout_s is None else timeout_s
        cap = self.settings.row_cap if row_cap is None else row_cap
        start = time.perf_counter()
        try:
            with self.engine.connect() as conn:
                raw = conn.connection.dbapi_connection
                if self.dialect == "sqlite":
                    columns, rows, truncated = self._run_sqlite(raw, sql, timeout, cap)
                elif self.dialect == "duckdb":
                    from tagql.db.duck import run_duckdb

                    columns, rows, truncated = run_duckdb(raw, sql, timeout, cap, self._duck_functions)
                else:
                    columns, rows, truncated = self._run_server(conn, raw, sql, timeout, cap)
        except QueryTimeout:
            raise
        except (sqlite3.Error, DBAPIError, self._driver_error) as exc:
            raise self._translate(exc, timeout) from exc
        result = Result(sql, columns, rows, truncated, cap, time.perf_counter() - start)
        if truncated:
            result.notes.append(f"result cut at the row cap of {cap} rows (raise TAGQL_DB__ROW_CAP to see more)")
        return result

    def _run_sqlite(self, raw: Any, sql: str, timeout: float, cap: int) -> tuple[list[str], list[tuple], bool]:
        for (fname, nargs), fn in self._functions.items():
            raw.create_function(fname, nargs, fn)
        deadline = time.monotonic() + timeout
        raw.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 20_000)
        try:
            cur = raw.cursor()
            try:
                cur.execute(sql)
                rows = cur.fetchmany(cap + 1)
            except sqlite3.OperationalError as exc:
                if "interrupted" in str(exc) and time.monotonic() <= deadline:
                    # stopped before its deadline: Ctrl-C arrived in the progress handler
                    raise KeyboardInterrupt from None
                if "interrupted" in str(exc):
                    raise QueryTimeout(
                        f"query stopped after the {timeout:g} s statement timeout",
                        "simplify the question or raise TAGQL_DB__STATEMENT_TIMEOUT_S",
                    ) from exc
                raise
            columns = [d[0] for d in (cur.description or [])]
            cur.close()
        finally:
            raw.set_progress_handler(None, 0)
        return columns, [tuple(r) for r in rows[:cap]], len(rows) > cap

    def _run_server(self, conn: Any, raw: Any, sql: str, timeout: float, cap: int) -> tuple[list[str], list[tuple], bool]:
        ms = max(1, int(timeout * 1000))
        cur = raw.cursor()
        try:
            if self.dialect == "postgres":
                # first statement of the driver's implicit transaction: makes it read-only
                cur.execute("SET TRANSACTION READ ONLY")
                cur.execute(f"SET LOCAL statement_timeout = {ms}")
            elif self.dialect == "mysql":
                cur.execute("SET SESSION TRANSACTION READ ONLY")
                cur.execute(f"SET SESSION MAX_EXECUTION_TIME = {ms}")
                cur.execute("START TRANSACTION READ ONLY")
            cur.execute(sql)
            rows = cur.fetchmany(cap + 1)
            columns = [d[0] for d in (cur.description or [])]
        finally:
            try:
                raw.rollback()
            finally:
                cur.close()
        return columns, [tuple(r) for r in rows[:cap]], len(rows) > cap

    def _translate(self, exc: BaseException, timeout: float) -> Exception:
        text = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        low = text.lower()
        if "statement timeout" in low or "max_execution_time" in low or "canceling statement" in low:
            return QueryTimeout(
                f"query stopped after the {timeout:g} s statement timeout",
                "simplify the question or raise TAGQL_DB__STATEMENT_TIMEOUT_S",
            )
        if "disabled by configuration" in low:  # DuckDB: a file outside the database, an extension
            return UnsafeQuery(f"the database refused access outside the database: {text}")
        if "not authorized" in low or "read-only" in low or "readonly" in low or "read only" in low:
            return UnsafeQuery(f"the database refused a write: {text}")
        return QueryFailed(f"the database rejected the query: {text}")

    def close(self) -> None:
        self.engine.dispose()


def _sqlite_engine(path: Path) -> sa.Engine:
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        conn.set_authorizer(_sqlite_authorizer)
        return conn

    return sa.create_engine("sqlite+pysqlite://", creator=connect, poolclass=sa.pool.QueuePool, pool_size=4)


def open_database(
    target: str | Path, *, settings: DatabaseSettings | None = None, descriptions_dir: Path | str | None = None,
    name: str | None = None,
) -> Database:
    """Open a SQLite file path (read-only) or a SQLAlchemy URL (``postgresql://...``).

    BIRD-style column descriptions are read from ``descriptions_dir`` or, for a SQLite file, from a
    ``database_description/`` folder next to it when present.
    """
    text = str(target)
    if "://" in text:
        try:
            url = make_url(text)
        except (ArgumentError, ValueError) as exc:
            raise DatabaseNotFound(f"cannot parse the database URL '{text}': {exc}",
                                   "check it, e.g. postgresql://user:password@host:5432/dbname") from None
        if url.drivername.startswith("sqlite"):
            if not url.database or url.database == ":memory:":
                raise DatabaseNotFound("an in-memory SQLite database has no data", "pass a database file")
            return open_database(Path(url.database), settings=settings, descriptions_dir=descriptions_dir, name=name)
        if url.drivername.startswith("duckdb"):  # a file, opened read-only like SQLite (see duck.py)
            if not url.database or url.database == ":memory:":
                raise DatabaseNotFound("an in-memory DuckDB database has no data", "pass a database file")
            return open_database(Path(url.database), settings=settings, descriptions_dir=descriptions_dir, name=name)
        try:
            engine = sa.create_engine(url, pool_pre_ping=True)
            with engine.connect():
                pass
        except (NoSuchModuleError, ArgumentError, ImportError) as exc:
            raise DatabaseNotFound(
                f"no driver for '{url.drivername}': {exc}", install_hint("postgres")
            ) from exc
        except OperationalError as exc:
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            raise DatabaseNotFound(
                f"cannot connect to {url.render_as_string(hide_password=True)}: {reason}",
                "check the URL, credentials and that the server is running",
            ) from exc
        db_name = name or url.database or url.host or "database"
        desc = Path(descriptions_dir) if descriptions_dir else None
        return Database(engine, name=db_name, settings=settings, descriptions_dir=desc)
    path = Path(text).expanduser()
    if not path.exists():
        raise DatabaseNotFound(f"database file '{path}' does not exist", "check the path or pass a SQLAlchemy URL")
    if path.is_dir():
        raise NotADatabase(f"'{path}' is a directory, not a database file", "pass the .sqlite file inside it")
    from tagql.db.duck import duckdb_engine, is_duckdb_file

    duck = is_duckdb_file(path)
    with path.open("rb") as f:
        if f.read(16) != SQLITE_MAGIC and not duck:
            raise NotADatabase(f"'{path}' is not a SQLite database", "pass a .sqlite/.db file or a SQLAlchemy URL")
    if descriptions_dir is None and (path.parent / "database_description").is_dir():
        descriptions_dir = path.parent / "database_description"
    if duck:
        return Database(
            duckdb_engine(path), name=name or path.stem, settings=settings,
            descriptions_dir=Path(descriptions_dir) if descriptions_dir else None, path=path,
        )
    return Database(
        _sqlite_engine(path), name=name or path.stem, settings=settings,
        descriptions_dir=Path(descriptions_dir) if descriptions_dir else None, path=path,
    )
