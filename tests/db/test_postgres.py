"""PostgreSQL for real: introspection, read-only transactions, statement timeout, dialect, and one
question answered end to end by the local model."""

from __future__ import annotations

from pathlib import Path

import pytest

import tagql
from tagql.config import DatabaseSettings
from tagql.db import open_database
from tagql.errors import QueryFailed, QueryTimeout, UnsafeQuery
from tagql.llm.scripted import ScriptedLLM
from tagql.pipeline import TagQL

pytestmark = pytest.mark.postgres


def test_introspection_and_dialect(postgres_url: str) -> None:
    db = open_database(postgres_url)
    assert db.dialect == "postgres"
    hero = db.schema.table("superhero")
    assert hero is not None and hero.column("id").primary_key
    assert {fk.ref_table for fk in hero.foreign_keys} >= {"publisher", "colour"}
    assert db.execute("SELECT COUNT(*) FROM superhero").rows == [(750,)]


@pytest.mark.parametrize("sql", ["DELETE FROM colour", "CREATE TABLE evil (x int)", "UPDATE superhero SET height_cm = 1"])
def test_writes_fail_in_the_read_only_transaction(postgres_url: str, sql: str) -> None:
    db = open_database(postgres_url)
    with pytest.raises(UnsafeQuery, match="read-only transaction"):
        db.execute(sql)
    assert db.execute("SELECT COUNT(*) FROM colour").rows[0][0] == 35


def test_statement_timeout(postgres_url: str) -> None:
    db = open_database(postgres_url, settings=DatabaseSettings(statement_timeout_s=0.5))
    with pytest.raises(QueryTimeout):
        db.execute("SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b")
    assert db.execute("SELECT 1").rows == [(1,)]


def test_sqlite_flavoured_sql_is_transpiled_for_postgres(postgres_url: str) -> None:
    db = open_database(postgres_url)
    # backticks are SQLite/MySQL-only; sqlglot rewrites them for PostgreSQL
    tq = TagQL(db, ScriptedLLM(["SELECT `superhero_name` FROM `superhero` WHERE `id` = 1", "3-D Man."]))
    answer = tq.ask("What is the name of hero 1?")
    assert answer.values == ["3-D Man"] and '"superhero_name"' in answer.sql
    with pytest.raises(QueryFailed):
        db.execute("SELECT no_such_column FROM superhero")


@pytest.mark.model
def test_local_model_answers_on_postgres(postgres_url: str, demo_db_path: Path) -> None:
    tq = tagql.connect(postgres_url, llm="local", descriptions=demo_db_path.parent / "database_description")
    answer = tq.ask("How many superheroes are published by Marvel Comics?")
    assert answer.values == [387], answer.sql
