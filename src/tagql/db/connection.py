"""Open a database (SQLite path or any SQLAlchemy URL) and run queries safely.

Read-only by construction: SQLite is opened with ``mode=ro`` and an authorizer that denies every
write action; server databases run each query in a read-only transaction that is rolled back.
Every query has a statement timeout and a row cap.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError

from tagql.config import DatabaseSettings
from tagql.db import dialects
from tagql.db.dialects import sqlite as sqlite_dialect
from tagql.db.introspect import introspect
from tagql.db.limits import check_bounds
from tagql.db.schema import Schema
from tagql.errors import (
    DatabaseNotFound, NotADatabase, QueryFailed, QueryTimeout, TagqlError, UnsafeQuery, install_hint,
)

SQLITE_MAGIC = sqlite_dialect.MAGIC


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
        descriptions_dir: Path | None = None, path: Path | None = None, backend: dialects.Dialect | None = None,
    ) -> None:
        self.engine = engine
        self.name = name
        self.settings = settings or DatabaseSettings()
        self.descriptions_dir = descriptions_dir
        self.path = path
        self.backend = backend or dialects.for_name(engine.dialect.name)  # what differs per engine (tagql.db.dialects)
        self.dialect = self.backend.name  # sqlglot dialect name
        dbapi = getattr(engine.dialect, "loaded_dbapi", None) or getattr(engine.dialect, "dbapi", None)
        self._driver_error: type[BaseException] = getattr(dbapi, "Error", sqlite3.Error)
        self._functions: dict[tuple[str, int], Any] = {}
        self._duck_functions: dict[str, Any] = {}  # DuckDB: name (lower) -> duck.DuckFunction
        # its stored-value index once tagql.db.values.value_index has loaded or built it: the repairs that
        # ask where a constant is stored read it instead of probing columns one by one (never built here)
        self.values: Any = None

    def register_function(
        self, name: str, nargs: int, fn: Any, *, vector_fn: Any = None, returns: str = "VARCHAR",
    ) -> None:
        """Make a Python function callable from SQL on SQLite or DuckDB (e.g. LM operators as UDFs).

        Applied to the pooled connection before each query; ``nargs=-1`` accepts any number. On DuckDB
        (see ``duck.py``) arguments arrive as text, ``vector_fn`` (one list per argument in, one result per
        row out) lets the function see many rows at once, and ``returns`` is the SQL type of the result."""
        self.backend.register_function(self, name, nargs, fn, vector_fn=vector_fn, returns=returns)

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
        check_bounds(sql, self.dialect)  # one statement, bounded size and nesting (limits.py)
        self.backend.check_statement(sql)  # PostgreSQL: no function with side effects
        try:
            with self.engine.connect() as conn:
                raw = conn.connection.dbapi_connection
                columns, rows, truncated = self.backend.run(self, raw, sql, timeout, cap)
        except QueryTimeout:
            raise
        except (sqlite3.Error, DBAPIError, self._driver_error) as exc:
            raise self._translate(exc, timeout) from exc
        result = Result(sql, columns, rows, truncated, cap, time.perf_counter() - start)
        if truncated:
            result.notes.append(f"result cut at the row cap of {cap} rows (raise TAGQL_DB__ROW_CAP to see more)")
        return result

    def stream(self, sql: str, *, chunk_rows: int = 5000, timeout_s: float | None = None) -> RowStream:
        """The rows of one read-only query in chunks, never the whole result in memory on PostgreSQL (a
        server-side cursor; other engines: :meth:`execute`'s rows under the row cap, in chunks). Use as
        ``with db.stream(sql) as rows: for chunk in rows: ...``; same checks and timeout as :meth:`execute`."""
        return RowStream(self, sql, chunk_rows, self.settings.statement_timeout_s if timeout_s is None else timeout_s)

    def _translate(self, exc: BaseException, timeout: float) -> Exception:
        text = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        low = text.lower()
        if "statement timeout" in low or "max_execution_time" in low or "canceling statement" in low:
            return QueryTimeout(
                f"query stopped after the {timeout:g} s statement timeout",
                "simplify the question or raise TAGQL_DB__STATEMENT_TIMEOUT_S",
            )
        if "didn't produce a result" in low:  # psycopg: a command (SET, COMMIT ...) where a query belongs
            return UnsafeQuery("only queries may run; that statement returns no rows")
        if "cannot insert multiple commands" in low or "one statement at a time" in low:  # PostgreSQL, SQLite
            return UnsafeQuery("only a single statement may run (the database refused several)")
        if "disabled by configuration" in low:  # DuckDB: a file outside the database, an extension
            return UnsafeQuery(f"the database refused access outside the database: {text}")
        if self.path is not None and not self.path.exists():
            return DatabaseNotFound(f"database file '{self.path}' is gone (deleted or moved while tagql was running)",
                                    "put it back, or open the database again")
        if "database is locked" in low or "database table is locked" in low:
            return QueryFailed(f"the database file is locked by another program's write (waited {timeout:g} s)",
                               "retry when that write has finished")
        if "not authorized" in low or "read-only" in low or "readonly" in low or "read only" in low:
            return UnsafeQuery(f"the database refused a write: {text}")
        return QueryFailed(f"the database rejected the query: {text}")

    def close(self) -> None:
        self.engine.dispose()


class RowStream:
    """Chunks of one query's rows (see :meth:`Database.stream`): ``columns`` once the first chunk arrived,
    ``fetches`` the round trips that fetched rows, ``rows`` the rows handed out so far."""

    def __init__(self, db: Database, sql: str, chunk_rows: int, timeout: float) -> None:
        self.db, self.sql, self.chunk_rows, self.timeout = db, sql, max(1, chunk_rows), timeout
        self.columns: list[str] = []
        self.fetches = 0
        self.rows = 0
        self._conn: Any = None

    def __enter__(self) -> RowStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _fetched(self, n: int) -> None:
        self.fetches += 1

    def __iter__(self) -> Iterator[list[tuple[Any, ...]]]:
        db = self.db
        check_bounds(self.sql, db.dialect)
        db.backend.check_statement(self.sql)
        self._conn = db.engine.connect()
        try:
            raw = self._conn.connection.dbapi_connection
            for columns, chunk in db.backend.stream(db, raw, self.sql, self.timeout, self.chunk_rows, self._fetched):
                self.columns = columns
                self.rows += len(chunk)
                if chunk:
                    yield chunk
        except QueryTimeout:
            raise
        except (sqlite3.Error, DBAPIError, db._driver_error) as exc:
            raise db._translate(exc, self.timeout) from exc
        finally:
            self.close()


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
            url.render_as_string(hide_password=True)  # host and port parse
        except (ArgumentError, ValueError) as exc:
            raise DatabaseNotFound(f"not a valid database URL: {_first_line(exc)}",
                                   "write it as dialect://user:password@host:port/database") from exc
        if url.drivername.startswith("sqlite"):
            if not url.database or url.database == ":memory:":
                raise DatabaseNotFound("an in-memory SQLite database has no data", "pass a database file")
            return open_database(Path(url.database), settings=settings, descriptions_dir=descriptions_dir, name=name)
        if url.drivername.startswith("duckdb"):  # a file, opened read-only like SQLite (see duck.py)
            if not url.database or url.database == ":memory:":
                raise DatabaseNotFound("an in-memory DuckDB database has no data", "pass a database file")
            return open_database(Path(url.database), settings=settings, descriptions_dir=descriptions_dir, name=name)
        if url.drivername == "postgresql":  # psycopg 3 (tagql[postgres]) whatever SQLAlchemy's default
            url = url.set(drivername="postgresql+psycopg")
        backend = dialects.for_name(url.get_backend_name())
        shown = url.render_as_string(hide_password=True)
        timeout = (settings or DatabaseSettings()).statement_timeout_s
        try:
            engine = sa.create_engine(url, pool_pre_ping=True, **backend.engine_options(timeout))
            with engine.connect() as conn:
                backend.check_connection(conn.connection.dbapi_connection)
        except (NoSuchModuleError, ArgumentError, ImportError) as exc:
            raise DatabaseNotFound(
                f"no driver for '{url.drivername}': {exc}", install_hint("postgres")
            ) from exc
        except (OperationalError, ValueError) as exc:
            reason = _first_line(getattr(exc, "orig", None) or exc)
            raise DatabaseNotFound(
                f"cannot connect to {shown}: {reason}", "check the URL, credentials and that the server is running",
            ) from exc
        except TagqlError:
            engine.dispose()
            raise
        except Exception as exc:  # the driver's own error while checking the role
            engine.dispose()
            raise DatabaseNotFound(f"cannot check the role on {shown}: {_first_line(exc)}",
                                   "check that the server is PostgreSQL 12 or later") from exc
        db_name = name or url.database or url.host or "database"
        desc = Path(descriptions_dir) if descriptions_dir else None
        return Database(engine, name=db_name, settings=settings, descriptions_dir=desc, backend=backend)
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
        sqlite_dialect.engine(path, (settings or DatabaseSettings()).statement_timeout_s), name=name or path.stem, settings=settings,
        descriptions_dir=Path(descriptions_dir) if descriptions_dir else None, path=path,
    )


def _first_line(exc: object) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else exc.__class__.__name__
