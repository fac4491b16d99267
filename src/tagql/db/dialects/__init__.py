"""Dialects: what differs between database engines, one module per engine.

A :class:`Dialect` says how tagql opens, introspects and runs read-only queries on one engine, and
which SQL habits it has (SQLite reads ``"x"`` as a string, keeps dates as text, ...). Stages ask the
database's dialect (``db.backend``) instead of comparing dialect names::

    if db.backend.strftime_dates: ...

Modules: :mod:`~tagql.db.dialects.sqlite`, :mod:`~tagql.db.dialects.duckdb`,
:mod:`~tagql.db.dialects.postgres`, :mod:`~tagql.db.dialects.mysql`. Any other SQLAlchemy backend gets
the generic :class:`Dialect` (each query in a transaction that is rolled back).
"""

from __future__ import annotations

from tagql.db.dialects.base import SQLALCHEMY_NAMES, Dialect, Rows
from tagql.db.dialects.duckdb import DuckDB
from tagql.db.dialects.mysql import MySQL
from tagql.db.dialects.postgres import PostgreSQL
from tagql.db.dialects.sqlite import SQLite

_BY_NAME: dict[str, type[Dialect]] = {d.name: d for d in (SQLite, DuckDB, PostgreSQL, MySQL)}


def for_name(name: str) -> Dialect:
    """The dialect for a sqlglot or SQLAlchemy dialect name (``sqlite``, ``postgresql``, ``duckdb``, ...)."""
    name = SQLALCHEMY_NAMES.get(name, name)
    known = _BY_NAME.get(name)
    return known() if known else Dialect(name)


__all__ = ["Dialect", "DuckDB", "MySQL", "PostgreSQL", "Rows", "SQLALCHEMY_NAMES", "SQLite", "for_name"]
