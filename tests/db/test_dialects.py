"""The dialect protocol: one module per engine answers what differs; no stage compares dialect names."""

from __future__ import annotations

import re
from pathlib import Path

from tagql.db import open_database
from tagql.db.dialects import Dialect, DuckDB, MySQL, PostgreSQL, SQLite, for_name

SRC = Path(__file__).resolve().parents[2] / "src" / "tagql"


def test_names_map_to_their_modules() -> None:
    assert isinstance(for_name("sqlite"), SQLite)
    assert isinstance(for_name("postgresql"), PostgreSQL) and isinstance(for_name("postgres"), PostgreSQL)
    assert isinstance(for_name("duckdb"), DuckDB)
    assert isinstance(for_name("mariadb"), MySQL)
    other = for_name("mssql")
    assert type(other) is Dialect and other.name == "tsql" and not other.sample_values


def test_sqlite_habits_belong_to_sqlite_only() -> None:
    assert SQLite.sqlite_syntax and SQLite.strftime_dates and SQLite.double_quoted_strings
    for d in (DuckDB, PostgreSQL, MySQL):
        assert not (d.sqlite_syntax or d.strftime_dates or d.double_quoted_strings)
    assert SQLite.python_functions and DuckDB.python_functions and not PostgreSQL.python_functions


def test_a_database_carries_its_dialect(demo_db_path: Path) -> None:
    db = open_database(demo_db_path)
    assert isinstance(db.backend, SQLite) and db.dialect == "sqlite"


def test_no_stage_branches_on_a_dialect_name() -> None:
    pattern = re.compile(r"dialect\s*(==|!=|in \(|not in \()")
    found = [f"{p.relative_to(SRC)}:{i}" for p in SRC.rglob("*.py") if p.name != "cli.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, found
