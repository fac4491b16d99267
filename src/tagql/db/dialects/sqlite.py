"""SQLite: the file is opened read-only (``mode=ro``) with an authorizer that denies every write action and
every PRAGMA but a few read-only introspection ones; a progress handler enforces the statement timeout."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import sqlalchemy as sa

from tagql.db.dialects.base import Dialect, Rows
from tagql.errors import QueryTimeout

if TYPE_CHECKING:
    from tagql.db.connection import Database

MAGIC = b"SQLite format 3\x00"
MAX_VALUE_BYTES = 64 * 1024 * 1024  # no string or blob above it: randomblob(1e9) fails instead of taking 1 GB

# only reading is allowed. PRAGMAs are allowed only for these read-only introspection pragmas
# (SQLAlchemy's inspector uses them); everything else is denied.
_READ_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}
for _name in ("SQLITE_RECURSIVE",):
    if hasattr(sqlite3, _name):
        _READ_ACTIONS.add(getattr(sqlite3, _name))
_READ_PRAGMAS = {
    "table_info", "table_xinfo", "foreign_key_list", "index_list", "index_info", "index_xinfo",
    "database_list", "table_list", "collation_list",
}
_QUERY_PRAGMAS = {"read_uncommitted", "foreign_keys", "encoding", "page_size", "user_version", "schema_version",
                  "data_version"}  # FTS5 reads data_version when it connects


def authorizer(action: int, arg1: str | None, arg2: str | None, db: str | None, src: str | None) -> int:
    if action in _READ_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA:
        name = (arg1 or "").lower()
        if name in _READ_PRAGMAS or (name in _QUERY_PRAGMAS and arg2 is None):
            return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


_SHADOW_WRITES = {sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE}


def shadow_tables(conn: sqlite3.Connection) -> frozenset[str]:
    """Tables that belong to a virtual table (FTS3/4/5 ``docs_content``, R*Tree ``r_node`` ...)."""
    rows = conn.execute(
        "SELECT s.name FROM sqlite_master v JOIN sqlite_master s ON s.type = 'table' "
        "AND substr(s.name, 1, length(v.name) + 1) = v.name || '_' "
        "WHERE v.type = 'table' AND v.sql LIKE 'CREATE VIRTUAL TABLE%'").fetchall()
    return frozenset(r[0] for r in rows)


def reading_authorizer(shadow: frozenset[str]) -> Any:
    """:func:`authorizer`, plus what connecting a virtual table asks: FTS and R*Tree declare their columns
    (an UPDATE of sqlite_master) and prepare statements on their shadow tables. Nothing of it can write:
    the file is opened read-only and SQLite refuses a real UPDATE of sqlite_master by itself."""
    if not shadow:
        return authorizer

    def check(action: int, arg1: str | None, arg2: str | None, db: str | None, src: str | None) -> int:
        if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master":
            return sqlite3.SQLITE_OK
        if action in _SHADOW_WRITES and arg1 in shadow:
            return sqlite3.SQLITE_OK
        return authorizer(action, arg1, arg2, db, src)

    return check


def engine(path: Path, busy_timeout_s: float = 5.0) -> sa.Engine:
    """A SQLAlchemy engine whose connections open ``path`` read-only behind the authorizer. A writer of
    another program holding the file's lock is waited for up to ``busy_timeout_s`` (the statement timeout:
    the progress handler does not run while SQLite waits for a lock), then the query fails."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=busy_timeout_s)
        try:
            shadow = shadow_tables(conn)
        except sqlite3.OperationalError:  # locked by a writer, gone: not a connection to keep in the pool
            conn.close()
            raise
        except sqlite3.DatabaseError:  # not a database: the first query says so
            shadow = frozenset()
        conn.set_authorizer(reading_authorizer(shadow))
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        return conn

    return sa.create_engine("sqlite+pysqlite://", creator=connect, poolclass=sa.pool.QueuePool, pool_size=4)


class SQLite(Dialect):
    name = "sqlite"
    sqlite_syntax = True
    strftime_dates = True
    double_quoted_strings = True
    python_functions = True
    sample_values = True

    def internal_tables(self, db: Database) -> frozenset[str]:
        """An FTS/R*Tree table's own storage (``docs_data``, ``r_node`` ...)."""
        with db.engine.connect() as conn:
            return shadow_tables(conn.connection.dbapi_connection)

    def register_function(self, db: Database, name: str, nargs: int, fn: Any, *, vector_fn: Any = None,
                          returns: str = "VARCHAR") -> None:
        db._functions[(name, nargs)] = fn  # created on the pooled connection before each query

    def stream(self, db: Database, raw: Any, sql: str, timeout: float, chunk_rows: int,
               on_fetch: Any) -> Iterator[tuple[list[str], list[tuple[Any, ...]]]]:
        """SQLite steps through a result as it is fetched: ``fetchmany(chunk_rows)`` until it ends, under the
        same timeout (progress handler) as :meth:`run`; no row cap."""
        for (fname, nargs), fn in db._functions.items():
            raw.create_function(fname, nargs, fn)
        deadline = time.monotonic() + timeout
        raw.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 20_000)
        cur = raw.cursor()
        try:
            try:
                cur.execute(sql)
                columns = [d[0] for d in (cur.description or [])]
                while True:
                    rows = cur.fetchmany(chunk_rows)
                    on_fetch(len(rows))
                    yield columns, [tuple(r) for r in rows]
                    if len(rows) < chunk_rows:
                        break
            except sqlite3.OperationalError as exc:
                if "interrupted" in str(exc):
                    raise QueryTimeout(f"query stopped after the {timeout:g} s statement timeout",
                                       "simplify the question or raise TAGQL_DB__STATEMENT_TIMEOUT_S") from exc
                raise
        finally:
            cur.close()
            raw.set_progress_handler(None, 0)

    def run(self, db: Database, raw: Any, sql: str, timeout: float, cap: int) -> Rows:
        for (fname, nargs), fn in db._functions.items():
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
