"""Engine-side guarantees that need no PostgreSQL server: bounded checks, bounded values, files with
virtual tables, malformed URLs and sqlglot's own crashes as one-line errors (issue 35)."""

from __future__ import annotations

import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from tagql.db import open_database, parse_read_only
from tagql.errors import DatabaseNotFound, InvalidQuery, QueryFailed, UnsafeQuery


@pytest.fixture()
def demo_copy(tmp_path: Path, demo_db_path: Path) -> Path:
    dst = tmp_path / "superhero.sqlite"
    shutil.copy(demo_db_path, dst)
    return dst


def test_deep_nesting_is_refused_not_a_recursion_error() -> None:
    sql = "SELECT " + "(" * 50 + "1" + ")" * 50
    for dialect in ("sqlite", "duckdb", "postgres"):
        with pytest.raises(UnsafeQuery, match="nests parentheses 50 deep"):
            parse_read_only(sql, dialect)


def test_huge_statements_are_refused_in_linear_time(demo_copy: Path) -> None:
    ors = "SELECT 1 FROM superhero WHERE " + " OR ".join(f"id = {i}" for i in range(16_000))
    chain = "WITH c0 AS (SELECT 1 AS x), " + ", ".join(f"c{i} AS (SELECT x FROM c{i - 1})" for i in range(1, 3000))
    chain += " SELECT x FROM c2999"
    short = "WITH c0 AS (SELECT 1 AS x), " + ", ".join(f"c{i} AS (SELECT x FROM c{i - 1})" for i in range(1, 100))
    short += " SELECT x FROM c99"
    db = open_database(demo_copy)
    for sql, reason in ((ors, "characters long"), (chain, "characters long"), (short, "defines 100 CTEs")):
        start = time.perf_counter()
        with pytest.raises(UnsafeQuery, match=reason):
            parse_read_only(sql, "sqlite")
        with pytest.raises(UnsafeQuery, match=reason):  # the engine path is bounded too
            db.execute(sql)
        assert time.perf_counter() - start < 5


def test_huge_values_are_refused_by_sqlite(demo_copy: Path) -> None:
    with pytest.raises(QueryFailed, match="too big"):
        open_database(demo_copy).execute("SELECT length(randomblob(1000000000))")


def test_files_with_fts_and_rtree_tables_open(tmp_path: Path) -> None:
    path = tmp_path / "search.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE VIRTUAL TABLE docs USING fts5(body)")
    conn.execute("CREATE VIRTUAL TABLE old USING fts4(body)")
    conn.execute("CREATE VIRTUAL TABLE box USING rtree(id, minx, maxx)")
    conn.execute("INSERT INTO docs VALUES ('hello world')")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    db = open_database(path)
    # the virtual tables are the schema; their storage tables (docs_data, old_segdir, box_node ...) are not
    assert db.schema.table_names == ["box", "docs", "old"]
    assert db.execute("SELECT body FROM docs WHERE docs MATCH 'hello'").rows == [("hello world",)]
    assert db.execute("SELECT count(*) FROM box").rows == [(0,)]
    for write in ("INSERT INTO docs(docs) VALUES ('optimize')", "DELETE FROM docs_content",
                  "INSERT INTO box_node VALUES (9, x'00')", "UPDATE sqlite_master SET sql = ''"):
        with pytest.raises((UnsafeQuery, QueryFailed)):
            db.execute(write)
    db.close()
    assert path.read_bytes() == before


def test_a_malformed_url_is_one_line() -> None:
    with pytest.raises(DatabaseNotFound, match="not a valid database URL"):
        open_database("postgresql+psycopg://u:p@[::1/x")


def test_parser_crashes_become_one_line_refusals() -> None:
    with pytest.raises(UnsafeQuery, match="only SELECT queries may run, got SHOW"):
        parse_read_only("SHOW ALL", "duckdb")  # sqlglot raises IndexError here


def test_garbage_between_statements_is_not_cut_to_the_first(demo_copy: Path) -> None:
    db = open_database(demo_copy)
    for sql in ("SELECT 1; ATTACH '/tmp/x.db' AS m", "SELECT 1;;SELECT 2", "SELECT 1 -- x\n; DETACH main"):
        with pytest.raises(UnsafeQuery, match="single statement"):
            parse_read_only(sql, "sqlite")
        with pytest.raises(UnsafeQuery, match="single statement"):
            db.execute(sql)
    assert db.execute("SELECT 1;").rows == [(1,)]
    with pytest.raises(InvalidQuery, match="no SQL statement"):
        db.execute(" ; -- nothing")


@pytest.mark.parametrize("sql, refused", [
    ("SELECT length(repeat('x', 1000000000))", True),
    ("SELECT lpad('a', 1e9, 'x')", True),
    ("SELECT repeat('x', (SELECT 1000000000))", True),
    ("SELECT repeat('ab', 3) AS r", False),
    ("SELECT rpad(CAST(range AS VARCHAR), 4, '*') FROM range(3)", False),
    ("SELECT repeat('x', range) FROM range(1000000000, 1000000001)", True),  # computed: could be anything
])
def test_duckdb_bounds_the_strings_one_call_builds(tmp_path, sql, refused):
    """DuckDB cannot interrupt repeat('x', 1e9) (44 s at a 2 s limit, 2 GB): a constant length must be a
    literal of at most 10 million characters."""
    pytest.importorskip("duckdb")
    import duckdb

    from tagql.db import open_database
    from tagql.errors import UnsafeQuery

    path = tmp_path / "x.duckdb"
    duckdb.connect(str(path)).close()
    db = open_database(path)
    if refused:
        with pytest.raises(UnsafeQuery, match="at most 10,000,000 characters"):
            db.execute(sql)
    else:
        assert db.execute(sql).rows
