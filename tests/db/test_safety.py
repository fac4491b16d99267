"""The sqlglot checks: a single read-only query, and every table/column must exist."""

from __future__ import annotations

import pytest

from tagql.db.safety import fix_sqlite_double_quoted_strings, parse_read_only, validate_against_schema
from tagql.db.schema import Column, ForeignKey, Schema, Table
from tagql.errors import InvalidQuery, UnsafeQuery

SCHEMA = Schema(
    "heroes",
    [
        Table("superhero", [Column("id", "INTEGER", True), Column("superhero_name", "TEXT"),
                            Column("publisher_id", "INTEGER"), Column("full name", "TEXT")],
              [ForeignKey(["publisher_id"], "publisher", ["id"])]),
        Table("publisher", [Column("id", "INTEGER", True), Column("publisher_name", "TEXT")]),
    ],
)


def check(sql: str) -> None:
    tree = parse_read_only(sql, "sqlite")
    tree = fix_sqlite_double_quoted_strings(tree, SCHEMA)
    validate_against_schema(tree, SCHEMA)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id FROM superhero",
        'SELECT "full name" FROM superhero',
        "SELECT p.publisher_name, COUNT(*) AS n FROM superhero s JOIN publisher p ON s.publisher_id = p.id GROUP BY 1",
        "WITH big AS (SELECT publisher_id FROM superhero) SELECT COUNT(*) FROM big",
        "SELECT id FROM superhero UNION SELECT id FROM publisher",
        'SELECT id FROM superhero WHERE superhero_name = "Batman"',  # SQLite's double-quoted string
    ],
)
def test_valid_queries_pass(sql: str) -> None:
    check(sql)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("DROP TABLE superhero", "only SELECT"),
        ("UPDATE superhero SET id = 1", "only SELECT"),
        ("ATTACH 'x.db' AS y", "only SELECT"),
        ("PRAGMA writable_schema = ON", "only SELECT"),
        ("SELECT 1; DROP TABLE superhero", "single statement"),
        ("SELECT * INTO copy FROM superhero", "read-only"),
    ],
)
def test_writes_are_unsafe(sql: str, message: str) -> None:
    with pytest.raises(UnsafeQuery, match=message):
        check(sql)


def test_unknown_table_names_the_real_tables() -> None:
    with pytest.raises(InvalidQuery, match="unknown table 'heroes'; the tables are: superhero, publisher"):
        check("SELECT * FROM heroes")


def test_unknown_column_says_where_it_lives() -> None:
    with pytest.raises(InvalidQuery, match="'publisher_name' does not exist .* it is a column of: publisher"):
        check("SELECT publisher_name FROM superhero")
    with pytest.raises(InvalidQuery, match="no table has such a column"):
        check("SELECT height FROM superhero")


def test_column_under_the_wrong_alias_names_the_right_one() -> None:
    with pytest.raises(InvalidQuery, match=r"column T1.publisher_name: table T1 \(superhero\) has no column "
                                           r"'publisher_name'; use T2.publisher_name \(table publisher\)"):
        check("SELECT T1.publisher_name FROM superhero AS T1 JOIN publisher AS T2 ON T1.publisher_id = T2.id")


def test_garbage_is_invalid_not_unsafe() -> None:
    with pytest.raises(InvalidQuery):
        check("SELEC name FRM superhero")


def test_a_misspelt_column_gets_a_did_you_mean() -> None:
    with pytest.raises(InvalidQuery, match=r"no table has such a column \(did you mean publisher\.publisher_name or superhero\.publisher_id\?\)"):
        check("SELECT publisher_nam FROM superhero")
    with pytest.raises(InvalidQuery, match=r"has no column 'superhero_nme' \(did you mean superhero\.superhero_name\?\)"):
        check("SELECT T1.superhero_nme FROM superhero AS T1")


def test_an_unknown_table_says_what_it_probably_meant() -> None:
    with pytest.raises(InvalidQuery, match=r"unknown table 'publishers' \(did you mean publisher\?\)"):
        check("SELECT * FROM publishers")
    with pytest.raises(InvalidQuery, match=r"unknown table 'publisher_name' \(publisher\.publisher_name is a column\)"):
        check("SELECT * FROM publisher_name")


def test_a_lookup_that_selects_the_outer_querys_column_is_an_error() -> None:
    # SQLite runs it, reading the outer superhero_name: the IN holds for every hero with any publisher row
    with pytest.raises(InvalidQuery, match="selects superhero_name, which publisher does not store"):
        check("SELECT id FROM superhero WHERE superhero_name IN "
              "(SELECT superhero_name FROM publisher WHERE publisher_name = 'Marvel')")
    check("SELECT id FROM superhero WHERE publisher_id IN (SELECT id FROM publisher WHERE publisher_name = 'DC')")
    check("SELECT id FROM superhero AS s WHERE s.id IN (SELECT s.id FROM publisher)")  # qualified: as written
