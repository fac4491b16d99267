"""The generic dialect every engine's module subclasses (see ``tagql.db.dialects``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tagql.errors import QueryFailed

if TYPE_CHECKING:
    from tagql.db.connection import Database
    from tagql.db.schema import Table

Rows = tuple[list[str], list[tuple[Any, ...]], bool]  # columns, rows (at most the cap), truncated

# sqlglot dialect names for SQLAlchemy backend names
SQLALCHEMY_NAMES = {
    "sqlite": "sqlite", "postgresql": "postgres", "mysql": "mysql", "mariadb": "mysql", "mssql": "tsql",
    "oracle": "oracle", "duckdb": "duckdb", "snowflake": "snowflake", "bigquery": "bigquery",
}


class Dialect:
    """The generic dialect; each engine's module subclasses it. ``name`` is the sqlglot dialect name."""

    name: str = ""
    sqlite_syntax: bool = False  # SQLite-flavoured SQL runs as written (else it is transpiled from SQLite)
    strftime_dates: bool = False  # dates are stored as text and their parts read with STRFTIME
    double_quoted_strings: bool = False  # "Batman" is the string 'Batman' when no column has that name
    python_functions: bool = False  # Python functions can be registered and called from SQL
    sample_values: bool = False  # SELECT DISTINCT col ... LIMIT k reads sample values

    def __init__(self, name: str = "") -> None:
        if name:
            self.name = name

    def __repr__(self) -> str:
        return f"<dialect {self.name}>"

    def engine_options(self, timeout_s: float) -> dict[str, Any]:
        """Extra ``sqlalchemy.create_engine`` arguments for a server URL (connection settings)."""
        return {}

    def check_connection(self, raw: Any) -> None:
        """Called once on a new database's first connection: refuse what must not be used."""

    def check_statement(self, sql: str) -> None:
        """Refuse ``sql`` before it reaches the database (after ``limits.check_bounds``)."""

    def tables(self, db: Database) -> list[Table] | None:
        """The database's tables from the engine's own catalog; ``None``: use SQLAlchemy's inspector."""
        return None

    def internal_tables(self, db: Database) -> frozenset[str]:
        """Tables the inspector lists that hold no data of their own (an index's storage): left out of
        the schema."""
        return frozenset()

    def register_function(self, db: Database, name: str, nargs: int, fn: Any, *, vector_fn: Any = None,
                          returns: str = "VARCHAR") -> None:
        raise QueryFailed(f"SQL functions can only be registered on SQLite or DuckDB, not {self.name}")

    def run(self, db: Database, raw: Any, sql: str, timeout: float, cap: int) -> Rows:
        """Run one statement on the raw DBAPI connection ``raw``; at most ``cap`` rows (+ truncated)."""
        cur = raw.cursor()
        try:
            self.begin_read_only(cur, max(1, int(timeout * 1000)))
            cur.execute(sql)
            rows = cur.fetchmany(cap + 1)
            columns = [d[0] for d in (cur.description or [])]
        finally:
            try:
                raw.rollback()
            finally:
                cur.close()
        return columns, [tuple(r) for r in rows[:cap]], len(rows) > cap

    def stream(self, db: Database, raw: Any, sql: str, timeout: float, chunk_rows: int,
               on_fetch: Any) -> Iterator[tuple[list[str], list[tuple[Any, ...]]]]:
        """(columns, a chunk of at most ``chunk_rows`` rows) until the result ends. Generic: the rows of
        :meth:`run` under the database's row cap, cut into chunks (PostgreSQL streams from a server-side
        cursor instead). ``on_fetch(n)`` hears each fetch from the server."""
        columns, rows, _ = self.run(db, raw, sql, timeout, db.settings.row_cap)
        on_fetch(len(rows))
        for start in range(0, max(len(rows), 1), chunk_rows):
            yield columns, rows[start: start + chunk_rows]

    def begin_read_only(self, cur: Any, timeout_ms: int) -> None:
        """Start the read-only transaction with its statement timeout (generic: nothing to say)."""
