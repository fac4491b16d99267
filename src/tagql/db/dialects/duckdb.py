"""DuckDB (``tagql[duckdb]``): opened read-only with external access off; the implementation (engine,
one-SELECT check, timeout, vectorized Python functions, catalog introspection) is :mod:`tagql.db.duck`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tagql.db.dialects.base import Dialect, Rows

if TYPE_CHECKING:
    from tagql.db.connection import Database
    from tagql.db.schema import Table


class DuckDB(Dialect):
    name = "duckdb"
    python_functions = True
    sample_values = True

    def tables(self, db: Database) -> list[Table] | None:
        from tagql.db.duck import introspect_duckdb

        return introspect_duckdb(db.engine)

    def register_function(self, db: Database, name: str, nargs: int, fn: Any, *, vector_fn: Any = None,
                          returns: str = "VARCHAR") -> None:
        from tagql.db.duck import DuckFunction, rowwise

        db._functions[(name, nargs)] = fn
        db._duck_functions[name.lower()] = DuckFunction(name, nargs, vector_fn or rowwise(fn), returns)

    def run(self, db: Database, raw: Any, sql: str, timeout: float, cap: int) -> Rows:
        from tagql.db.duck import run_duckdb

        return run_duckdb(raw, sql, timeout, cap, db._duck_functions)
