"""Opening databases, introspection, prompt rendering, read-only execution, timeouts, row caps."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from tagql.config import DatabaseSettings
from tagql.db import open_database
from tagql.errors import DatabaseNotFound, NotADatabase, QueryFailed, QueryTimeout, UnsafeQuery


@pytest.fixture()
def demo_copy(tmp_path: Path, demo_db_path: Path) -> Path:
    dst = tmp_path / "superhero.sqlite"
    shutil.copy(demo_db_path, dst)
    shutil.copytree(demo_db_path.parent / "database_description", tmp_path / "database_description")
    return dst


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DatabaseNotFound, match="does not exist"):
        open_database(tmp_path / "nope.sqlite")


def test_non_database_file_is_a_clear_error(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.db"
    bogus.write_text("hello, not a database\n")
    with pytest.raises(NotADatabase, match="not a SQLite database"):
        open_database(bogus)
    with pytest.raises(NotADatabase, match="directory"):
        open_database(tmp_path)


def test_unreachable_server_is_a_clear_error() -> None:
    with pytest.raises(DatabaseNotFound, match="cannot connect"):
        open_database("postgresql://nobody:pw@127.0.0.1:1/none")


def test_introspection_reads_keys_descriptions_and_samples(demo_copy: Path) -> None:
    schema = open_database(demo_copy).schema
    assert {"superhero", "publisher", "colour", "hero_power"} <= set(schema.table_names)
    hero = schema.table("superhero")
    assert hero is not None and hero.column("id").primary_key
    fk_targets = {fk.ref_table for fk in hero.foreign_keys}
    assert {"publisher", "colour", "race", "gender", "alignment"} <= fk_targets
    assert "name of the superhero" in hero.column("superhero_name").description
    publisher = schema.table("publisher").column("publisher_name")
    assert len(publisher.samples) == 3 and all(isinstance(v, str) for v in publisher.samples)


def test_prompt_is_create_table_text_with_comments(demo_copy: Path) -> None:
    text = open_database(demo_copy).schema.to_prompt()
    assert "CREATE TABLE superhero (" in text
    assert "id INTEGER PRIMARY KEY, -- the unique identifier of the superhero" in text
    assert "FOREIGN KEY (publisher_id) REFERENCES publisher(id)" in text
    assert "e.g. 'ABC Studios'" in text


def test_prompt_shows_no_sample_values_for_key_columns(shared_data: Path) -> None:
    """student_club's keys are 17-character record ids: samples of them cost tokens and name nothing."""
    schema = open_database(shared_data / "bird/dev_databases/student_club/student_club.sqlite").schema
    assert schema.table("attendance").column("link_to_event").samples  # introspected ...
    text = schema.to_prompt()
    assert "'rec" not in text  # ... but not rendered, for primary or foreign keys
    assert "e.g. 'Angela', 'Grant', 'Luisa'" in text  # other columns keep theirs
    assert "commonsense evidence" not in text


def test_select_runs_and_reports_columns(demo_copy: Path) -> None:
    r = open_database(demo_copy).execute("SELECT superhero_name, height_cm FROM superhero WHERE id <= 2 ORDER BY id")
    assert r.columns == ["superhero_name", "height_cm"]
    assert r.rows == [("3-D Man", 188), ("A-Bomb", 203)]
    assert not r.truncated


@pytest.mark.parametrize(
    "sql",
    [
        "DROP TABLE superhero",
        "UPDATE superhero SET height_cm = 0",
        "DELETE FROM superhero",
        "INSERT INTO colour (id, colour) VALUES (999, 'x')",
        "CREATE TABLE evil (x INT)",
        "ATTACH DATABASE '/tmp/evil.db' AS evil",
        "PRAGMA writable_schema = ON",
        "PRAGMA journal_mode = WAL",
        "VACUUM",
    ],
)
def test_engine_refuses_writes_even_without_static_checks(demo_copy: Path, sql: str) -> None:
    """The connection itself is read-only: ``execute`` bypasses the sqlglot check here."""
    before = sha256(demo_copy)
    db = open_database(demo_copy)
    with pytest.raises((UnsafeQuery, QueryFailed)):
        db.execute(sql)
    db.close()
    assert sha256(demo_copy) == before
    assert not (demo_copy.parent / "superhero.sqlite-wal").exists()


def test_multi_statement_is_refused_by_the_engine(demo_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = sha256(demo_copy)
    with pytest.raises(UnsafeQuery, match="only a single statement may run, got 2"):
        open_database(demo_copy).execute("SELECT 1; DROP TABLE superhero")
    # without the statement count, SQLite itself refuses the second statement
    monkeypatch.setattr("tagql.db.connection.check_bounds", lambda sql, dialect: [])
    with pytest.raises(UnsafeQuery, match="single statement"):
        open_database(demo_copy).execute("SELECT 1; ATTACH '/tmp/x.db' AS m")
    assert sha256(demo_copy) == before


def test_runaway_query_hits_the_statement_timeout(demo_copy: Path) -> None:
    db = open_database(demo_copy, settings=DatabaseSettings(statement_timeout_s=0.5))
    forever = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    with pytest.raises(QueryTimeout, match="0.5 s statement timeout"):
        db.execute(forever)
    # the connection is usable afterwards
    assert db.execute("SELECT count(*) FROM superhero").rows == [(750,)]


def test_row_cap_cuts_and_says_so(demo_copy: Path) -> None:
    db = open_database(demo_copy, settings=DatabaseSettings(row_cap=10))
    r = db.execute("SELECT id FROM superhero")
    assert len(r.rows) == 10 and r.truncated
    assert any("row cap of 10" in n for n in r.notes)


def test_sqlite_url_is_opened_read_only_too(demo_copy: Path) -> None:
    db = open_database(f"sqlite:///{demo_copy}")
    with pytest.raises(UnsafeQuery):
        db.execute("DELETE FROM colour")
    assert db.execute("SELECT count(*) FROM colour").rows[0][0] > 0
